#include "schedd/server/allocation_watch.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <vector>

#include "common/units.h"
#include "schedd/server/live_jobs.h"

namespace mlsched::server {

int64_t WallNow();

namespace {

using Event = v1::WatchAllocationEvent;
using Clock = std::chrono::steady_clock;

class FinishedWatch final : public grpc::ServerWriteReactor<Event> {
 public:
  explicit FinishedWatch(grpc::Status st) { Finish(std::move(st)); }
  void OnDone() override { delete this; }
};

bool Ended(v1::JobState s) { return s != v1::PENDING && s != v1::RUNNING && s != v1::JOB_STATE_UNSPECIFIED; }

std::string Fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string Seconds(Clock::duration d) {
  return FormatDuration(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

}  // namespace

// One open watch: writes the grace, then the idle warnings it is told, one write at a time, until
// the client goes.
class AllocationWatch::Live final : public grpc::ServerWriteReactor<Event> {
 public:
  Live(AllocationWatch* w, int64_t job_id, uint32_t uid) : w_(w), job_id_(job_id), uid_(uid) {
    Event first;
    first.set_grace_seconds(w->limits_.grace.count());
    Push(std::move(first));
  }
  /// Queues `e` (at most kMaxQueued; a client that reads nothing loses the oldest).
  void Push(Event e) {
    {
      std::lock_guard lk(mu_);
      if (finished_) return;
      if (writing_) {
        if (queued_.size() >= kMaxQueued) queued_.pop_front();
        queued_.push_back(std::move(e));
        return;
      }
      writing_ = true;
      current_ = std::move(e);
    }
    StartWrite(&current_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return End(grpc::Status::OK);
    {
      std::lock_guard lk(mu_);
      if (queued_.empty() || finished_) {
        writing_ = false;
        return;
      }
      current_ = std::move(queued_.front());
      queued_.pop_front();
    }
    StartWrite(&current_);
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    w_->Released(this, job_id_, uid_);
    delete this;
  }

 private:
  static constexpr size_t kMaxQueued = 8;
  void End(grpc::Status st) {
    std::lock_guard lk(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(std::move(st));
  }
  AllocationWatch* w_;
  int64_t job_id_;
  uint32_t uid_;
  std::mutex mu_;
  Event current_;
  std::deque<Event> queued_;
  bool writing_ = false;
  bool finished_ = false;
};

AllocationWatch::AllocationWatch(Controller& ctl, Limits limits) : ctl_(ctl), limits_(limits) {
  reaper_ = std::thread([this] { ReaperLoop(); });
}

AllocationWatch::~AllocationWatch() { Stop(); }

void AllocationWatch::Stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

size_t AllocationWatch::Watched() {
  std::lock_guard lk(mu_);
  return watchers_.size();
}

grpc::ServerWriteReactor<Event>* AllocationWatch::Refuse(grpc::Status status) { return new FinishedWatch(std::move(status)); }

grpc::ServerWriteReactor<Event>* AllocationWatch::Watch(const v1::WatchAllocationRequest& req, const Caller& caller) {
  const std::string job = "job " + std::to_string(req.job_id());
  v1::JobInfo info;
  if (req.job_id() <= 0 || !ctl_.Get(caller, req.job_id(), &info).ok()) return Refuse({grpc::StatusCode::NOT_FOUND, job + " is unknown"});
  if (!MaySeeDetails(caller, info.uid(), info.user()))
    return Refuse({grpc::StatusCode::PERMISSION_DENIED, job + " belongs to " + info.user()});
  if (Ended(info.state()))
    return Refuse({grpc::StatusCode::FAILED_PRECONDITION, job + " is " + v1::JobState_Name(info.state())});
  if (!info.spec().interactive())
    return Refuse({grpc::StatusCode::FAILED_PRECONDITION,
                   job + " is a batch job: only an interactive allocation (mlrun, mlalloc) is bound to a client"});
  Live* live = nullptr;
  {
    std::lock_guard lk(mu_);
    if (per_user_[caller.uid] >= limits_.max_per_user)
      return Refuse({grpc::StatusCode::RESOURCE_EXHAUSTED,
                     caller.user + " watches " + std::to_string(limits_.max_per_user) + " allocations already"});
    ++per_user_[caller.uid];
    ++watchers_[req.job_id()];
    deadline_.erase(req.job_id());
    live = new Live(this, req.job_id(), caller.uid);
    live_[req.job_id()].push_back(live);
  }
  return live;
}

void AllocationWatch::Released(Live* live, int64_t job_id, uint32_t uid) {
  std::lock_guard lk(mu_);
  if (auto it = live_.find(job_id); it != live_.end()) {
    std::erase(it->second, live);
    if (it->second.empty()) live_.erase(it);
  }
  if (--per_user_[uid] == 0) per_user_.erase(uid);
  if (--watchers_[job_id] > 0) return;
  watchers_.erase(job_id);
  deadline_[job_id] = Clock::now() + limits_.grace;
  cv_.notify_all();
}

void AllocationWatch::Tell(int64_t job_id, const Event& event) {
  std::lock_guard lk(mu_);  // a Live leaves live_ (Released) before it is deleted
  if (auto it = live_.find(job_id); it != live_.end())
    for (Live* l : it->second) l->Push(event);
}

void AllocationWatch::ReaperLoop() {
  std::unique_lock lk(mu_);
  auto next_idle_check = Clock::now(), next_adopt = Clock::now();
  while (!stopping_) {
    if (Clock::now() >= next_adopt) {
      lk.unlock();
      AdoptUnwatched();
      next_adopt = Clock::now() + kAdoptEvery;
      lk.lock();
    }
    cv_.wait_for(lk, std::chrono::milliseconds(500));
    if (stopping_) break;
    const auto now = Clock::now();
    std::vector<int64_t> due;
    for (auto it = deadline_.begin(); it != deadline_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      due.push_back(it->first);
      it = deadline_.erase(it);
    }
    const bool check = now >= next_idle_check;
    if (due.empty() && !check) continue;
    lk.unlock();
    if (!due.empty()) CancelAbandoned(std::move(due));
    if (check) {
      CheckIdle();
      next_idle_check = Clock::now() + limits_.idle_check;
    }
    lk.lock();
  }
}

void AllocationWatch::AdoptUnwatched() {
  const Caller self{"schedd", static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), true};
  v1::ListJobsRequest req;
  req.add_states(v1::PENDING);
  req.add_states(v1::RUNNING);
  req.set_page_size(1000);
  std::vector<int64_t> interactive;
  for (int page = 0; page < 10000; ++page) {
    v1::ListJobsResponse resp;
    if (!ctl_.List(self, req, WallNow(), &resp).ok()) return;
    for (const auto& j : resp.jobs())
      if (j.spec().interactive()) interactive.push_back(j.job_id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  std::lock_guard lk(mu_);
  const auto at = Clock::now() + limits_.grace;
  for (int64_t id : interactive) {
    if (watchers_.count(id) || deadline_.count(id)) continue;
    deadline_[id] = at;
    spdlog::info("job {}: an interactive allocation nobody watches (schedd restarted or took over): cancelled in {} s "
                 "unless its client comes back", id, limits_.grace.count());
  }
}

void AllocationWatch::CancelAbandoned(std::vector<int64_t> due) {
  const Caller self{"schedd", static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), true};
  for (int64_t id : due) {
    idle_.erase(id);
    v1::JobInfo info;
    if (!ctl_.Get(self, id, &info).ok() || Ended(info.state())) continue;
    v1::CancelJobsRequest req;
    req.add_job_ids(id);
    auto resp = ctl_.Cancel(self, req, WallNow(), "ClientGone");
    spdlog::info("job {}: its interactive client went away {} s ago: {}", id, limits_.grace.count(),
                 resp.cancelled_size() ? "cancelled" : "not cancelled: " + (resp.errors_size() ? resp.errors(0) : ""));
  }
}

void AllocationWatch::CheckIdle() {
  const Caller self{"schedd", static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), true};
  std::vector<int64_t> watched;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, n] : watchers_) watched.push_back(id);
  }
  std::erase_if(idle_, [&](const auto& e) { return !std::binary_search(watched.begin(), watched.end(), e.first); });
  const core::InteractivePolicy policy = ctl_.Interactive();
  const auto now = Clock::now();
  const std::map<int64_t, v1::JobInfo> running = RunningSummaries(ctl_, watched);  // one look, from memory
  for (int64_t id : watched) {
    auto it = running.find(id);
    if (it == running.end() || !it->second.spec().interactive()) {
      idle_.erase(id);  // pending (or gone): its idle time starts when it runs
      continue;
    }
    const v1::JobInfo& info = it->second;
    Idle& idle = idle_.try_emplace(id, Idle{now, false}).first->second;
    if (sessions_)
      if (auto io = sessions_->LastActivity(id)) idle.last_active = std::max(idle.last_active, *io);
    std::optional<UsageBook::CpuUse> cpu = usage_ ? usage_->Cpu(info) : std::nullopt;
    const double gpu = usage_ ? usage_->GpuUtil(info).value_or(-1) : -1;  // percent; < 0 = not measured
    if ((cpu && cpu->cores >= policy.idle_cpu_below) || (gpu >= 0 && gpu >= policy.idle_gpu_below)) idle.last_active = now;
    if (policy.idle_timeout <= 0) continue;
    const auto timeout = std::chrono::seconds(policy.idle_timeout);
    const auto warning = std::chrono::seconds(std::min(policy.idle_warning, policy.idle_timeout));
    const auto idle_for = now - idle.last_active;
    std::string why = "no session input or output, CPU " +
                      (cpu ? Fixed2(cpu->cores) + " cores" : std::string("not measured")) + " (below " +
                      Fixed2(policy.idle_cpu_below) + ")";
    if (gpu >= 0) why += ", GPU " + Fixed2(gpu) + " % (below " + Fixed2(policy.idle_gpu_below) + ")";
    if (idle_for >= timeout) {
      Event last;
      last.set_idle_warning("released: idle for " + Seconds(idle_for) + " (" + why + "; policy [interactive] idle_timeout " +
                            FormatDuration(policy.idle_timeout) + ")");
      Tell(id, last);
      v1::CancelJobsRequest req;
      req.add_job_ids(id);
      auto resp = ctl_.Cancel(self, req, WallNow(), "IdleTimeout");
      spdlog::info("job {}: interactive allocation idle for {} ({}): {}", id, Seconds(idle_for), why,
                   resp.cancelled_size() ? "released" : "not released: " + (resp.errors_size() ? resp.errors(0) : ""));
      idle_.erase(id);
    } else if (idle_for >= timeout - warning && !idle.warned) {
      Event e;
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(timeout - idle_for);
      e.set_release_in_s(std::max<int64_t>(1, left.count()));
      e.set_idle_warning("idle for " + Seconds(idle_for) + " (" + why + "): released in " + FormatDuration(e.release_in_s()) +
                         " unless used");
      Tell(id, e);
      idle.warned = true;
    } else if (idle_for < timeout - warning && idle.warned) {
      Tell(id, Event{});  // in use again: no warning
      idle.warned = false;
    }
  }
}

}  // namespace mlsched::server
