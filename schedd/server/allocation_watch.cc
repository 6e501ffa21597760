#include "schedd/server/allocation_watch.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <vector>

namespace mlsched::server {

int64_t WallNow();

namespace {

using Event = v1::WatchAllocationEvent;

class FinishedWatch final : public grpc::ServerWriteReactor<Event> {
 public:
  explicit FinishedWatch(grpc::Status st) { Finish(std::move(st)); }
  void OnDone() override { delete this; }
};

bool Ended(v1::JobState s) { return s != v1::PENDING && s != v1::RUNNING && s != v1::JOB_STATE_UNSPECIFIED; }

}  // namespace

// One open watch: writes the grace once, then waits for the client to go.
class AllocationWatch::Live final : public grpc::ServerWriteReactor<Event> {
 public:
  Live(AllocationWatch* w, int64_t job_id, uint32_t uid) : w_(w), job_id_(job_id), uid_(uid) {
    event_.set_grace_seconds(w->limits_.grace.count());
    StartWrite(&event_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) End(grpc::Status::OK);
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    w_->Released(job_id_, uid_);
    delete this;
  }

 private:
  void End(grpc::Status st) {
    std::lock_guard lk(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(std::move(st));
  }
  AllocationWatch* w_;
  int64_t job_id_;
  uint32_t uid_;
  Event event_;
  std::mutex mu_;
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
  {
    std::lock_guard lk(mu_);
    if (per_user_[caller.uid] >= limits_.max_per_user)
      return Refuse({grpc::StatusCode::RESOURCE_EXHAUSTED,
                     caller.user + " watches " + std::to_string(limits_.max_per_user) + " allocations already"});
    ++per_user_[caller.uid];
    ++watchers_[req.job_id()];
    deadline_.erase(req.job_id());
  }
  return new Live(this, req.job_id(), caller.uid);
}

void AllocationWatch::Released(int64_t job_id, uint32_t uid) {
  std::lock_guard lk(mu_);
  if (--per_user_[uid] == 0) per_user_.erase(uid);
  if (--watchers_[job_id] > 0) return;
  watchers_.erase(job_id);
  deadline_[job_id] = std::chrono::steady_clock::now() + limits_.grace;
  cv_.notify_all();
}

void AllocationWatch::ReaperLoop() {
  const Caller self{"schedd", static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), true};
  std::unique_lock lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(500));
    const auto now = std::chrono::steady_clock::now();
    std::vector<int64_t> due;
    for (auto it = deadline_.begin(); it != deadline_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      due.push_back(it->first);
      it = deadline_.erase(it);
    }
    if (due.empty()) continue;
    lk.unlock();
    for (int64_t id : due) {
      v1::JobInfo info;
      if (!ctl_.Get(self, id, &info).ok() || Ended(info.state())) continue;
      v1::CancelJobsRequest req;
      req.add_job_ids(id);
      auto resp = ctl_.Cancel(self, req, WallNow());
      spdlog::info("job {}: its interactive client went away {} s ago: {}", id, limits_.grace.count(),
                   resp.cancelled_size() ? "cancelled" : "not cancelled: " + (resp.errors_size() ? resp.errors(0) : ""));
    }
    lk.lock();
  }
}

}  // namespace mlsched::server
