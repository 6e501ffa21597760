#include "agentd/attempts.h"
#include "agentd/image_cache.h"
#include "agentd/task_env.h"

namespace mlsched::agent {

bool AttemptTable::Known(const AttemptKey& key) const {
  std::lock_guard lk(mu_);
  return attempts_.count(key) || finished_.count(key);
}

std::string AttemptTable::Reserve(PlannedAttempt plan) {
  std::lock_guard lk(mu_);
  if (attempts_.count(plan.key) || finished_.count(plan.key)) return "";
  for (const auto& r : plan.ranks) {
    for (int32_t g : r.gpus) {
      auto it = gpu_holder_.find(g);
      if (it == gpu_holder_.end()) continue;
      const TaskKey& h = it->second;
      return "GPU " + std::to_string(g) + " is held by job " + std::to_string(h.job_id) + " attempt " +
             std::to_string(h.attempt) + " rank " + std::to_string(h.rank);
    }
  }
  for (const auto& r : plan.ranks)
    for (int32_t g : r.gpus) gpu_holder_[g] = TaskKey{plan.key.job_id, plan.key.attempt, r.rank};
  AttemptKey key = plan.key;
  attempts_[key] = Entry{std::move(plan), Phase::kPrepared, {}};
  return "";
}

AttemptTable::CommitResult AttemptTable::Commit(const AttemptKey& key) {
  std::lock_guard lk(mu_);
  CommitResult out;
  auto it = attempts_.find(key);
  if (it == attempts_.end()) {
    out.known = finished_.count(key) > 0;
    return out;
  }
  out.known = true;
  Entry& e = it->second;
  if (e.phase == Phase::kCommitted) return out;
  e.phase = Phase::kCommitted;
  for (const auto& r : e.plan.ranks) e.live.insert(r.rank);
  out.launch = e.plan.ranks;
  out.rendezvous = std::move(e.plan.rendezvous);
  out.rendezvous_port = e.plan.rendezvous_port;
  return out;
}

int32_t AttemptTable::RendezvousPort(const AttemptKey& key) const {
  std::lock_guard lk(mu_);
  auto it = attempts_.find(key);
  return it == attempts_.end() ? 0 : it->second.plan.rendezvous_port;
}

std::optional<AttemptTable::Phase> AttemptTable::PhaseOf(const AttemptKey& key) const {
  std::lock_guard lk(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return std::nullopt;
  return it->second.phase;
}

std::optional<std::string> AttemptTable::DropPrepared(const AttemptKey& key) {
  std::lock_guard lk(mu_);
  auto it = attempts_.find(key);
  if (it == attempts_.end() || it->second.phase != Phase::kPrepared) return std::nullopt;
  for (const auto& r : it->second.plan.ranks) ReleaseGpus({key.job_id, key.attempt, r.rank});
  std::string dir = it->second.plan.dir;
  attempts_.erase(it);
  RememberFinished(key);
  return dir;
}

std::vector<TaskKey> AttemptTable::LiveTasks(const AttemptKey& key) const {
  std::lock_guard lk(mu_);
  std::vector<TaskKey> out;
  auto it = attempts_.find(key);
  if (it == attempts_.end()) return out;
  for (int32_t r : it->second.live) out.push_back({key.job_id, key.attempt, r});
  return out;
}

std::optional<LaunchRequest> AttemptTable::LiveRequest(const TaskKey& task) const {
  std::lock_guard lk(mu_);
  auto it = attempts_.find(task.Attempt());
  if (it == attempts_.end() || it->second.phase != Phase::kCommitted || !it->second.live.count(task.rank)) return std::nullopt;
  for (const auto& r : it->second.plan.ranks)
    if (r.rank == task.rank) {
      LaunchRequest req = r.request;
      AddCommitEnvironment(&req.env, it->second.master_port, -1);
      return req;
    }
  return std::nullopt;
}

void AttemptTable::SetMasterPort(const AttemptKey& key, int32_t port) {
  std::lock_guard lk(mu_);
  if (auto it = attempts_.find(key); it != attempts_.end()) it->second.master_port = port;
}

std::optional<std::string> AttemptTable::RankExited(const TaskKey& task) {
  std::lock_guard lk(mu_);
  ReleaseGpus(task);
  auto it = attempts_.find(task.Attempt());
  if (it == attempts_.end()) return std::nullopt;
  it->second.live.erase(task.rank);
  if (it->second.phase != Phase::kCommitted || !it->second.live.empty()) return std::nullopt;
  std::string dir = it->second.plan.dir;
  attempts_.erase(it);
  RememberFinished(task.Attempt());
  return dir;
}

std::vector<AttemptKey> AttemptTable::PreparedNotIn(const std::set<TaskKey>& keep) const {
  std::lock_guard lk(mu_);
  std::vector<AttemptKey> out;
  for (const auto& [key, e] : attempts_) {
    if (e.phase != Phase::kPrepared) continue;
    bool kept = false;
    for (const auto& r : e.plan.ranks) kept |= keep.count({key.job_id, key.attempt, r.rank}) > 0;
    if (!kept) out.push_back(key);
  }
  return out;
}

std::vector<std::string> AttemptTable::Directories() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const auto& [key, e] : attempts_) out.push_back(e.plan.dir);
  return out;
}

std::map<int32_t, TaskKey> AttemptTable::HeldGpus() const {
  std::lock_guard lk(mu_);
  return gpu_holder_;
}

std::vector<AttemptTable::Committed> AttemptTable::CommittedAttempts() const {
  std::lock_guard lk(mu_);
  std::vector<Committed> out;
  for (const auto& [key, e] : attempts_) {
    if (e.phase != Phase::kCommitted || e.live.empty()) continue;
    Committed c{key, e.plan.prepare, e.master_port, e.live, false, ""};
    for (const auto& r : e.plan.ranks) {
      if (!r.request.container) continue;
      c.container = true;
      if (r.request.container->image) c.image_digest = r.request.container->image->digest;
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool AttemptTable::AnyPrepared() const {
  std::lock_guard lk(mu_);
  for (const auto& [key, e] : attempts_)
    if (e.phase == Phase::kPrepared) return true;
  return false;
}

std::string AttemptTable::Restore(PlannedAttempt plan, const std::set<int32_t>& live, int32_t master_port) {
  std::lock_guard lk(mu_);
  if (attempts_.count(plan.key) || finished_.count(plan.key)) return "attempt " + plan.key.ToString() + " is known";
  for (const auto& r : plan.ranks) {
    if (!live.count(r.rank)) continue;
    for (int32_t g : r.gpus)
      if (gpu_holder_.count(g)) return "GPU " + std::to_string(g) + " is held twice";
  }
  Entry e{std::move(plan), Phase::kCommitted, {}, master_port};
  for (const auto& r : e.plan.ranks) {
    if (!live.count(r.rank)) continue;
    e.live.insert(r.rank);
    for (int32_t g : r.gpus) gpu_holder_[g] = TaskKey{e.plan.key.job_id, e.plan.key.attempt, r.rank};
  }
  e.plan.rendezvous.reset();  // handed to rank 0 long ago
  AttemptKey key = e.plan.key;
  attempts_[key] = std::move(e);
  return "";
}

void AttemptTable::ReleaseGpus(const TaskKey& task) {
  std::erase_if(gpu_holder_, [&](const auto& kv) { return kv.second == task; });
}

void AttemptTable::RememberFinished(const AttemptKey& key) {
  if (!finished_.insert(key).second) return;
  finished_order_.push_back(key);
  if (finished_order_.size() > kFinishedMemory) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

}  // namespace mlsched::agent
