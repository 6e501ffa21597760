// Agent: schedd's Notice (a line into the tasks' stderr, as their user) and the gang watchdog's
// CollectStacks (stacks.h): every live rank of the attempt here is
// traced as its user on a thread of its own, the traces written into the job's working directory,
// and the answer (files, summaries, whether a thread waits in a collective) sent to schedd.
#include <spdlog/spdlog.h>

#include <set>

#include "agentd/agent.h"

namespace mlsched::agent {

bool Agent::RunOnHelperThread(std::function<void()> work) {
  std::lock_guard lk(pull_mu_);
  std::erase_if(stack_threads_, [](auto& t) {
    if (!t.second->load()) return false;
    t.first.join();
    return true;
  });
  if (stopping_ || stack_threads_.size() >= kMaxHelperThreads) return false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  stack_threads_.emplace_back(std::thread([work = std::move(work), done] {
                                work();
                                *done = true;
                              }),
                              done);
  return true;
}

void Agent::HandleCollectStacks(const v1::CollectStacks& c) {
  // Each traces up to 64 ranks; beyond kMaxHelperThreads, schedd concludes without this answer.
  if (!RunOnHelperThread([this, c] { CollectStacks(c); })) spdlog::warn("job {}: stack traces not taken: busy", c.job_id());
}

namespace {

constexpr size_t kMaxNoticeBytes = 512;  // agent.proto Notice.text

}  // namespace

void Agent::HandleNotice(const v1::Notice& n) {
  // On a helper thread: the stderr file may sit on a slow file system.
  if (!RunOnHelperThread([this, n] { AppendNotice(n); })) spdlog::warn("job {}: notice dropped: busy", n.job_id());
}

void Agent::AppendNotice(const v1::Notice& n) {
  // Printable text only, bounded: the user's terminal may show the file.
  std::string text = n.text().substr(0, kMaxNoticeBytes);
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  text = "mlsched: " + text + "\n";
  std::set<std::string> done;  // ranks sharing one file get the line once
  for (const TaskKey& key : attempts_.LiveTasks(AttemptKey{n.job_id(), n.attempt()})) {
    auto req = attempts_.LiveRequest(key);
    if (!req || req->stderr_path.empty() || !done.insert(req->stderr_path).second) continue;
    const std::string err = AppendToFileAsUser(req->stderr_path, text, ToolUser{req->uid, req->gid, req->groups});
    if (!err.empty()) spdlog::warn("job {}: notice not written for rank {}: {}", AttemptKey{n.job_id(), n.attempt()}.ToString(), key.rank, err);
  }
}

void Agent::CollectStacks(const v1::CollectStacks& c) {
  const AttemptKey attempt{c.job_id(), c.attempt()};
  v1::AgentMessage reply;
  auto* out = reply.mutable_stacks();
  out->set_job_id(c.job_id());
  out->set_attempt(c.attempt());
  std::map<TaskKey, pid_t> pids;
  for (const auto& r : driver_->Running()) pids[r.key] = r.pid;
  for (const TaskKey& key : attempts_.LiveTasks(attempt)) {
    if (out->ranks_size() >= 64) break;
    auto req = attempts_.LiveRequest(key);
    auto pid = pids.find(key);
    if (!req || pid == pids.end()) continue;
    auto* r = out->add_ranks();
    r->set_rank(key.rank);
    const ToolUser user{req->uid, req->gid, req->groups};
    std::string error;
    const std::string traces = TakeTraces(stack_tools_, TaskProcesses(cgroups_ ? cgroups_->DirsOf(key) : std::vector<std::string>{}, pid->second),
                                          user, &error);
    r->set_error(error);
    r->set_in_collective(InCollective(traces));
    r->set_summary(SummarizeTraces(traces));
    if (traces.empty()) continue;
    const std::string name = "mlsched-stacks-" + std::to_string(key.job_id) + "." + std::to_string(key.attempt) + "." +
                             std::to_string(key.rank) + ".txt";
    const std::string header = "# mlsched gang watchdog: job " + std::to_string(key.job_id) + " attempt " +
                               std::to_string(key.attempt) + " rank " + std::to_string(key.rank) + " on " + cfg_.node.name +
                               ": " + c.reason().substr(0, 200) + "\n";
    if (std::string err = WriteFileAsUser(req->workdir, name, header + traces, user); err.empty()) r->set_file(req->workdir + "/" + name);
    else if (r->error().empty()) r->set_error(err);
    spdlog::info("job {}: stack traces of rank {}{}", attempt.ToString(), key.rank, r->file().empty() ? " not written: " + r->error() : " in " + r->file());
  }
  outbox_.Push(std::move(reply));
}

}  // namespace mlsched::agent
