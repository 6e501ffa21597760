#include "schedd/server/step_book.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/safe_text.h"
#include "common/session_checks.h"
#include "schedd/server/live_jobs.h"

namespace mlsched::server {

int64_t WallNow();

namespace {

// argv[0]'s base name, cut to kMaxStepNameBytes, printable.
std::string StepName(const std::string& argv0) {
  std::string n = argv0.substr(argv0.rfind('/') == std::string::npos ? 0 : argv0.rfind('/') + 1);
  if (n.empty()) n = argv0;
  n = n.substr(0, kMaxStepNameBytes);
  return IsSafeText(n) ? n : "step";
}

}  // namespace

StepBook::StepBook(Store& store, Controller& ctl) : store_(store), ctl_(ctl), created_(WallNow()) {}

grpc::Status StepBook::Start(const v1::JobInfo& job, const Caller& caller, int32_t ntasks, const std::string& argv0,
                             int32_t* step_id) {
  if (ntasks < 1 || ntasks > std::max(1, job.tasks_size()))
    return {grpc::StatusCode::INVALID_ARGUMENT, "a step of job " + std::to_string(job.job_id()) + " has 1.." +
                                                    std::to_string(std::max(1, job.tasks_size())) + " tasks (its world size), not " +
                                                    std::to_string(ntasks)};
  const int64_t now = WallNow();
  bool first = false;
  {
    std::lock_guard lk(mu_);
    first = !next_.count(job.job_id());
  }
  int32_t stored_next = 0;
  if (first)  // the ids an earlier schedd gave (read without the lock)
    for (const StepRow& r : store_.LoadSteps({job.job_id()}, kMaxStepsPerJob)) stored_next = std::max(stored_next, r.step_id + 1);
  StepRow row;
  std::vector<StepRow> swept;
  {
    std::lock_guard lk(mu_);
    swept = SweepLocked(now);
    int32_t& next = next_.try_emplace(job.job_id(), stored_next).first->second;
    if (next >= kMaxStepsPerJob)
      return {grpc::StatusCode::RESOURCE_EXHAUSTED,
              "job " + std::to_string(job.job_id()) + " has started " + std::to_string(kMaxStepsPerJob) + " steps (the limit)"};
    row.job_id = job.job_id();
    row.step_id = next++;
    row.name = StepName(argv0);
    row.ntasks = ntasks;
    row.uid = caller.uid;
    row.user = caller.user;
    row.state = "RUNNING";
    row.start_time = now;
    Live& s = live_[{row.job_id, row.step_id}];
    s.row = row;
    s.nodes.assign(static_cast<size_t>(ntasks), "");
  }
  Write(swept);
  try {
    store_.SaveStep(row).get();
  } catch (const std::exception& e) {
    std::lock_guard lk(mu_);
    live_.erase({row.job_id, row.step_id});
    return {grpc::StatusCode::UNAVAILABLE, std::string("the step could not be recorded: ") + e.what()};
  }
  *step_id = row.step_id;
  return grpc::Status::OK;
}

grpc::Status StepBook::Join(int64_t job_id, int32_t step_id, int32_t task, const Caller& caller, const std::string& node) {
  std::lock_guard lk(mu_);
  const std::string name = "step " + std::to_string(job_id) + "." + std::to_string(step_id);
  auto it = live_.find({job_id, step_id});
  if (it == live_.end()) return {grpc::StatusCode::FAILED_PRECONDITION, name + " is not running"};
  Live& s = it->second;
  if (!caller.privileged && caller.uid != s.row.uid)
    return {grpc::StatusCode::PERMISSION_DENIED, name + " was started by " + s.row.user};
  if (task < 0 || task >= s.row.ntasks)
    return {grpc::StatusCode::FAILED_PRECONDITION, name + " has " + std::to_string(s.row.ntasks) + " tasks, not task " + std::to_string(task)};
  if (!s.joined.insert(task).second)
    return {grpc::StatusCode::FAILED_PRECONDITION, name + " task " + std::to_string(task) + " started already"};
  s.nodes[static_cast<size_t>(task)] = node;
  return grpc::Status::OK;
}

StepRow StepBook::Finish(Live& s, const std::string& state, int64_t now) {
  std::string nodes;
  std::set<std::string> seen;
  for (const auto& n : s.nodes)
    if (!n.empty() && seen.insert(n).second) nodes += (nodes.empty() ? "" : ",") + n;
  s.row.nodes = nodes;
  s.row.end_time = now;
  if (!state.empty()) s.row.state = state;
  else if (s.lost) s.row.state = "NODE_FAIL";
  else if (s.signaled) s.row.state = "CANCELLED";
  else if (s.failed || s.row.exit_code != 0) s.row.state = "FAILED";
  else s.row.state = "COMPLETED";
  return s.row;
}

void StepBook::TaskEnded(int64_t job_id, int32_t step_id, int32_t task, int32_t exit_code, bool signaled,
                         const std::string& error, int64_t cpu_usec, int64_t max_rss) {
  std::vector<StepRow> rows;
  {
    std::lock_guard lk(mu_);
    auto it = live_.find({job_id, step_id});
    if (it == live_.end() || !it->second.ended.insert(task).second) return;
    Live& s = it->second;
    s.row.exit_code = std::max(s.row.exit_code, exit_code);
    s.signaled |= signaled;
    s.failed |= !error.empty();
    s.lost |= error.rfind(kSessionLostPrefix, 0) == 0;
    constexpr int64_t kMaxCpuUsec = int64_t{1} << 52, kMaxBytes = int64_t{1} << 50;  // beyond any task
    if (cpu_usec >= 0) s.row.cpu_usec = std::max<int64_t>(s.row.cpu_usec, 0) + std::min(cpu_usec, kMaxCpuUsec);
    if (max_rss >= 0) s.row.max_rss_bytes = std::max(s.row.max_rss_bytes, std::min(max_rss, kMaxBytes));
    if (static_cast<int32_t>(s.ended.size()) == s.row.ntasks) {
      rows.push_back(Finish(s, "", WallNow()));
      live_.erase(it);
    }
  }
  Write(rows);
}

std::vector<StepRow> StepBook::SweepLocked(int64_t now) {
  std::vector<StepRow> rows;
  const auto steady = std::chrono::steady_clock::now();
  if (steady - last_sweep_ < kSweepEvery) return rows;
  last_sweep_ = steady;
  std::vector<int64_t> ids;
  for (const auto& [key, s] : live_) ids.push_back(key.first);
  for (const auto& [job, next] : next_) ids.push_back(job);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const std::map<int64_t, v1::JobInfo> running = RunningSummaries(ctl_, ids);  // one look, from memory
  for (auto it = live_.begin(); it != live_.end();) {
    Live& s = it->second;
    const bool job_ended = !running.count(s.row.job_id);
    const bool abandoned = s.joined.size() == s.ended.size() && steady - s.started > kJoinTimeout;
    if (!job_ended && !abandoned) {
      ++it;
      continue;
    }
    if (abandoned && !job_ended) s.failed = true;  // tasks that never started
    rows.push_back(Finish(s, job_ended ? "CANCELLED" : "", now));
    it = live_.erase(it);
  }
  std::erase_if(next_, [&](const auto& e) { return !running.count(e.first); });
  return rows;
}

void StepBook::Write(const std::vector<StepRow>& rows) {
  for (const StepRow& r : rows) {
    try {
      store_.SaveStep(r).get();
    } catch (const std::exception& e) {
      spdlog::warn("step {}.{}: its end could not be recorded: {}", r.job_id, r.step_id, e.what());
    }
  }
}

grpc::Status StepBook::List(const std::vector<int64_t>& job_ids, std::vector<StepRow>* out) {
  const int64_t now = WallNow();
  std::vector<StepRow> swept;
  {
    std::lock_guard lk(mu_);
    swept = SweepLocked(now);
  }
  Write(swept);
  std::vector<StepRow> rows = store_.LoadSteps(job_ids, kMaxListedSteps + 1);
  if (rows.size() > kMaxListedSteps)
    return {grpc::StatusCode::OUT_OF_RANGE, "these jobs have more than " + std::to_string(kMaxListedSteps) +
                                                " steps (the most one answer lists): ask for fewer jobs"};
  std::vector<StepRow> stale;
  {
    std::lock_guard lk(mu_);
    for (StepRow& r : rows) {
      if (r.state != "RUNNING") continue;
      auto it = live_.find({r.job_id, r.step_id});
      if (it != live_.end()) {
        r = it->second.row;  // with the nodes joined so far
        std::string nodes;
        for (const auto& n : it->second.nodes)
          if (!n.empty() && nodes.find(n) == std::string::npos) nodes += (nodes.empty() ? "" : ",") + n;
        r.nodes = nodes;
        continue;
      }
      // RUNNING in the store but not here: an earlier schedd's, whose sessions ended with it (one of
      // this schedd's is one whose end is being written now).
      if (r.start_time >= created_) continue;
      r.state = "CANCELLED";
      r.end_time = now;
      stale.push_back(r);
    }
  }
  Write(stale);
  *out = std::move(rows);
  return grpc::Status::OK;
}

size_t StepBook::Running() {
  std::lock_guard lk(mu_);
  return live_.size();
}

}  // namespace mlsched::server
