// Controller: the gang watchdog ([watchdog]). A running gang whose ranks report their step
// (MLSCHED_STATUS_FILE, RunningTask.step) and stop advancing for stall_after is diagnosed: its
// agents take the stack traces of every rank (CollectStacks; agentd/stacks.h writes them into the
// job's working directory), then the gang is checkpoint-requeued (SIGTERM, requeue_grace, SIGKILL;
// reason Stalled). The node at fault is suspected: the ranks outside the collective while others
// wait in it, else the ranks behind the gang's highest step. A node suspected drain_after times
// within suspect_window is drained with that evidence as its reason, so the gang restarts without
// it. Nothing here sees a clock: `now` comes from the caller (Tick, heartbeats).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <set>

#include "schedd/server/controller.h"

namespace mlsched::server {

namespace {

constexpr int64_t kStackWaitS = 30;       // a diagnosis concludes when every node answered or after this
constexpr int kMaxRanksPerAnswer = 64;    // agent.proto StacksCollected.ranks
constexpr size_t kMaxSummaryBytes = 1024; // RankStacks.summary
constexpr size_t kMaxFileBytes = 512;     // RankStacks.file

std::string Clean(const std::string& s, size_t max) {
  std::string out = s.substr(0, max);
  for (char& c : out)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f) c = ' ';
  return out;
}

std::string Joined(const std::map<std::string, std::vector<std::string>>& by_node) {
  std::string out;
  for (const auto& [node, why] : by_node) out += (out.empty() ? "" : ", ") + node;
  return out;
}

}  // namespace

void Controller::ExcludeNodeLocked(JobRec& j, const std::string& node) {
  // The job's own evidence only steers the job itself (one user's status files must not move
  // anyone else's work): its next attempts avoid the node, as if submitted with --exclude.
  auto& ex = j.spec.exclude_nodes;
  if (std::find(ex.begin(), ex.end(), node) != ex.end()) return;
  if (ex.size() >= core::kMaxExcludedNodes) ex.erase(ex.begin());
  ex.push_back(node);
}

void Controller::WatchGangsLocked(int64_t now) {
  const core::WatchdogPolicy& wp = policy_.watchdog;
  CheckStragglersLocked(now);
  for (const auto& stall : watchdog_.TakeStalls(wp.stall_after, now)) {
    JobRec* j = Find(stall.job);
    if (!j || j->state != core::JobState::kRunning || j->attempt != stall.attempt || !j->requeue_on_stop.empty() ||
        j->evicting || j->preempting || j->resizing || j->stall_at != 0)
      continue;
    j->stall_at = now;
    j->stall_step = stall.step;
    j->stall_seconds = now - stall.since;
    j->stacks.clear();
    stalls_open_.insert(j->id);
    const std::string what = "stalled at step " + std::to_string(stall.step) + " for " + std::to_string(j->stall_seconds) + " s";
    spdlog::warn("job {} attempt {}: {}; collecting stack traces", j->id, j->attempt, what);
    Await(store_.AppendEvent(j->id, "", "STALLED", what + "; collecting stack traces of every rank"));
    v1::SchedulerMessage m;
    m.mutable_collect_stacks()->set_job_id(j->id);
    m.mutable_collect_stacks()->set_attempt(j->attempt);
    m.mutable_collect_stacks()->set_reason(what);
    SendToNodes(*j, m);
  }
  // Diagnoses whose agents did not all answer in time conclude with what came (a copy: concluding
  // erases from the set).
  for (int64_t id : std::set<int64_t>(stalls_open_)) {
    JobRec* j = Find(id);
    if (!j || j->stall_at == 0 || j->state != core::JobState::kRunning) stalls_open_.erase(id);
    else if (now - j->stall_at >= kStackWaitS) ConcludeStallLocked(*j, now);
  }
}

void Controller::OnStacksLocked(const std::string& node, const v1::StacksCollected& s, int64_t now) {
  JobRec* j = Find(s.job_id());
  if (!j || !PlacedOn(*j, node, -1)) return RejectAgentMessage(node, "stack traces of job " + std::to_string(s.job_id()));
  if (j->state != core::JobState::kRunning || j->attempt != s.attempt() || j->stall_at == 0) return;  // late
  v1::StacksCollected& kept = j->stacks[node];
  kept.set_job_id(s.job_id());
  kept.set_attempt(s.attempt());
  kept.clear_ranks();
  for (int i = 0; i < std::min(s.ranks_size(), kMaxRanksPerAnswer); ++i) {
    if (!PlacedOn(*j, node, s.ranks(i).rank())) continue;  // only ranks this node holds
    auto* r = kept.add_ranks();
    r->set_rank(s.ranks(i).rank());
    r->set_file(Clean(s.ranks(i).file(), kMaxFileBytes));
    r->set_summary(Clean(s.ranks(i).summary(), kMaxSummaryBytes));
    r->set_in_collective(s.ranks(i).in_collective());
    r->set_error(Clean(s.ranks(i).error(), 256));
  }
  std::set<std::string> nodes;
  for (const auto& t : j->placement.tasks()) nodes.insert(t.node());
  for (const auto& n : nodes)
    if (!j->stacks.count(n)) return;  // more answers to come
  ConcludeStallLocked(*j, now);
}

void Controller::ConcludeStallLocked(JobRec& j, int64_t now) {
  const core::WatchdogPolicy& wp = policy_.watchdog;
  // Evidence: ranks outside the collective while others wait in it; else ranks behind the others.
  std::map<std::string, std::vector<std::string>> suspects;  // node -> why, per rank
  int in_collective = 0, outside = 0;
  std::string files;
  for (const auto& [node, s] : j.stacks)
    for (const auto& r : s.ranks()) {
      (r.in_collective() ? in_collective : outside) += 1;
      if (!r.file().empty() && files.size() < 600) files += (files.empty() ? "" : ", ") + r.file();
    }
  if (in_collective > 0 && outside > 0) {
    for (const auto& [node, s] : j.stacks)
      for (const auto& r : s.ranks())
        if (!r.in_collective()) suspects[node].push_back("rank " + std::to_string(r.rank()) + " outside the collective");
  } else {
    for (const auto& b : watchdog_.BehindRanks(j.id))
      suspects[b.node].push_back("rank " + std::to_string(b.rank) + " behind (step " + std::to_string(b.step) + " of " +
                                 std::to_string(j.stall_step) + ")");
  }
  std::string verdict = "stalled at step " + std::to_string(j.stall_step) + " for " + std::to_string(j.stall_seconds) + " s";
  verdict += files.empty() ? "; no stack traces" : "; stacks in " + files;
  std::string suspected;
  for (const auto& [node, why] : suspects) {
    std::string line = node + ": " + why.front() + (why.size() > 1 ? " (+" + std::to_string(why.size() - 1) + " more)" : "");
    suspected += (suspected.empty() ? "" : "; ") + line;
    SuspectNodeLocked(node, why.front(), j, now);
    ExcludeNodeLocked(j, node);
  }
  verdict += suspected.empty() ? "; no node suspected" : "; suspected " + suspected + "; its restart avoids " + Joined(suspects);
  Await(store_.AppendEvent(j.id, "", "STALL", verdict));
  j.stall_note = "restarted: " + verdict;
  spdlog::warn("job {} attempt {}: {}; requeueing", j.id, j.attempt, verdict);
  j.stall_at = 0;
  j.stacks.clear();
  stalls_open_.erase(j.id);
  StopToRequeueLocked(j, "Stalled", "stall", "a stall at step " + std::to_string(j.stall_step),
                      static_cast<int>(std::clamp<int64_t>(wp.requeue_grace, 0, 3600)), now);
  Trigger();
}

bool Controller::SuspectNodeLocked(const std::string& node, const std::string& why, const JobRec& j, int64_t now) {
  const core::WatchdogPolicy& wp = policy_.watchdog;
  const int times = watchdog_.Suspect(node, now, wp.suspect_window, j.uid);
  auto nit = nodes_.find(node);
  if (nit == nodes_.end() || times < wp.drain_after || nit->second.drained) return false;
  NodeRec& n = nit->second;
  n.drained = true;
  n.info.set_reason("watchdog: " + why + " of job " + std::to_string(j.id) + " in " + std::to_string(times) +
                    " user(s)' suspicions within " + std::to_string(wp.suspect_window) + " s");
  spdlog::error("node {}: drained: {}", node, n.info.reason());
  Await(store_.SaveNode(NodeRow{node, n.info.SerializeAsString(), true, n.info.reason()}));
  Await(store_.AppendEvent(0, node, "drain", n.info.reason()));
  return true;
}

void Controller::CheckStragglersLocked(int64_t now) {
  constexpr int64_t kStragglerCheckEvery = 10;  // seconds: each check walks every watched rank's samples
  const core::WatchdogPolicy& wp = policy_.watchdog;
  if (wp.straggler_ratio <= 0 || now - stragglers_checked_at_ < kStragglerCheckEvery) return;
  stragglers_checked_at_ = now;
  const auto stragglers = watchdog_.TakeStragglers(wp.straggler_ratio, wp.straggler_window, now);
  struct Suspected {
    int64_t job;
    std::string node, figures;
  };
  std::vector<Suspected> suspected;
  for (const auto& s : stragglers) {
    JobRec* j = Find(s.job);
    if (!j || j->state != core::JobState::kRunning || j->attempt != s.attempt || !j->requeue_on_stop.empty()) continue;
    char figures[160];
    std::snprintf(figures, sizeof figures, "%.2f s of compute per step against %.2f s on the other nodes over %lld s",
                  s.seconds_per_step, s.others_per_step, static_cast<long long>(wp.straggler_window));
    const std::string what = "straggler " + s.node + ": " + figures;
    spdlog::warn("job {} attempt {}: {}", j->id, j->attempt, what);
    Await(store_.AppendEvent(j->id, s.node, "STRAGGLER", what));
    SuspectNodeLocked(s.node, std::string("straggler (") + figures + ")", *j, now);
    suspected.push_back({j->id, s.node, figures});
  }
  // Every gang found straggling on a node now drained (in this round or within the window before)
  // restarts without it (checkpoint first), not only the one whose suspicion tipped it.
  std::set<std::string> drained;
  for (const auto& s : suspected) {
    auto nit = nodes_.find(s.node);
    if (nit != nodes_.end() && nit->second.drained) drained.insert(s.node);
  }
  for (const std::string& node : drained)
    for (int64_t id : RunningOnLocked(node)) {
      JobRec* j = Find(id);
      if (!j || !j->requeue_on_stop.empty() || !watchdog_.StragglingOn(id, node, now - wp.straggler_window)) continue;
      auto mine = std::find_if(suspected.begin(), suspected.end(), [&](const Suspected& s) { return s.job == id && s.node == node; });
      j->stall_note = "restarted without straggler " + node + ": " + (mine != suspected.end() ? mine->figures : "drained as a straggler of other gangs");
      StopToRequeueLocked(*j, "Straggler", "straggler", "straggling node " + node,
                          static_cast<int>(std::clamp<int64_t>(wp.requeue_grace, 0, 3600)), now);
      Trigger();
    }
}

}  // namespace mlsched::server
