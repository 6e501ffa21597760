// Controller: node health. Each heartbeat may carry its agent's verdict (agentd/health.h); the
// [health] policy says what follows: a node failing a check is drained with the checks as the
// reason ("health: xid: GPU 1 XID 79 (fallen off the bus)"), with drain-and-requeue the jobs
// running there are checkpoint-requeued (SIGTERM, requeue_grace, SIGKILL), and with auto_resume a
// node drained for health comes back once every check passes (LBNL NHC's default).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "schedd/server/controller.h"

namespace mlsched::server {

namespace {

constexpr int kMaxProblems = 16;          // agentd/health.h kMaxHealthProblems
constexpr size_t kMaxCheckBytes = 16;     // "program"
constexpr size_t kMaxReasonBytes = 256;   // agentd/health.h kMaxHealthReasonBytes
constexpr size_t kMaxSummaryBytes = 512;  // the node's reason
const char kHealthPrefix[] = "health: ";

// An agent's text as schedd keeps it: bounded, control characters (terminal escapes) blanked.
std::string Clean(const std::string& s, size_t max) {
  std::string out = s.substr(0, max);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return out;
}

}  // namespace

void Controller::ApplyHealthLocked(NodeRec& n, const v1::NodeHealth& h, int64_t now) {
  const std::string name = n.info.name();
  std::vector<std::string> problems;
  std::set<std::string> checks;
  for (int i = 0; i < std::min(h.problems_size(), kMaxProblems); ++i) {
    std::string check = Clean(h.problems(i).check(), kMaxCheckBytes);
    if (check.empty()) check = "unknown";
    checks.insert(check);
    problems.push_back(check + ": " + Clean(h.problems(i).reason(), kMaxReasonBytes));
  }
  std::string summary;
  for (const auto& p : problems) summary += (summary.empty() ? "" : "; ") + p;
  summary = kHealthPrefix + summary.substr(0, kMaxSummaryBytes);
  n.info.set_health_checked_at(h.checked_at());
  n.info.clear_health_problems();
  for (const auto& p : problems) n.info.add_health_problems(p);
  const bool drained_for_health = n.drained && n.info.reason().rfind(kHealthPrefix, 0) == 0;
  const bool was_failing = std::exchange(n.health_failing, !problems.empty());
  if (problems.empty()) {
    if (!was_failing && !drained_for_health) return;
    Await(store_.AppendEvent(0, name, "health-ok", "every health check passes"));
    if (drained_for_health && policy_.health.auto_resume) {
      n.drained = false;
      n.info.set_reason("");
      spdlog::info("node {}: its health checks pass again; resumed ([health] auto_resume)", name);
      Await(store_.SaveNode(NodeRow{name, n.info.SerializeAsString(), false, ""}));
      Await(store_.AppendEvent(0, name, "resume", "health checks pass again (auto_resume)"));
      Trigger();
    }
    return;
  }
  if (was_failing && n.drained) {
    // Still failing: the reason follows what fails now (a drain by an operator keeps theirs).
    if (drained_for_health && n.info.reason() != summary) {
      n.info.set_reason(summary);
      Await(store_.SaveNode(NodeRow{name, n.info.SerializeAsString(), true, summary}));
    }
    return;
  }
  // Newly failing, or resumed by an operator while it still fails (LBNL NHC drains it again).
  spdlog::error("node {}: {}", name, summary);
  Await(store_.AppendEvent(0, name, "health", summary));
  if (metrics_)
    for (const auto& c : checks) metrics_->CountHealthDrain(c);
  if (!n.drained) {
    n.drained = true;
    n.info.set_reason(summary);
    Await(store_.SaveNode(NodeRow{name, n.info.SerializeAsString(), true, summary}));
    Await(store_.AppendEvent(0, name, "drain", summary));
  }
  if (policy_.health.action == core::HealthPolicy::Action::kDrainAndRequeue) RequeueFromFailingNodeLocked(n, summary, now);
  Trigger();
}

void Controller::RequeueFromFailingNodeLocked(NodeRec& n, const std::string& summary, int64_t now) {
  const std::string name = n.info.name();
  const int grace = static_cast<int>(std::clamp<int64_t>(policy_.health.requeue_grace, 0, 3600));
  std::string jobs;
  for (int64_t id : RunningOnLocked(name)) {
    JobRec& j = jobs_[id];
    if (!j.requeue_on_stop.empty()) continue;
    StopToRequeueLocked(j, "NodeHealth", "node-health", "failed health check of node " + name, grace, now);
    jobs += (jobs.empty() ? "" : ",") + std::to_string(id);
    Await(store_.AppendEvent(id, name, "node-health", summary + "; checkpoint and requeue, grace " + std::to_string(grace) + " s"));
  }
  if (!jobs.empty())
    spdlog::warn("node {}: requeueing jobs [{}] off it ([health] drain-and-requeue, grace {} s)", name, jobs, grace);
}

}  // namespace mlsched::server

namespace mlsched::server {

void Controller::StopToRequeueLocked(JobRec& j, const std::string& requeue_reason, const std::string& signal_reason,
                                     const std::string& cause, int grace_s, int64_t now) {
  j.requeue_on_stop = requeue_reason;
  j.stop_cause = cause;
  if (core::IsElastic(j.spec) && j.stop_requested_at == 0) j.stop_requested_at = now;
  j.reason = requeue_reason;  // RUNNING while its tasks checkpoint within the grace
  v1::SchedulerMessage m;
  auto* s = m.mutable_signal();
  s->set_job_id(j.id);
  s->set_attempt(j.attempt);
  s->set_kill(true);
  s->set_grace_s(grace_s);
  s->set_reason(signal_reason);
  SendToNodes(j, m);
}

}  // namespace mlsched::server
