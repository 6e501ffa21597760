// AllocationWatch: binds interactive allocations (mlrun, mlalloc) to their clients, a component
// beside the Controller. A client keeps a JobService.WatchAllocation call open for its
// allocation (a callback reactor: no thread per watch); when the job's last watch ends and none
// is opened again within the grace, the job is cancelled (CancelJobs as schedd itself), so an
// allocation whose client was killed or lost its network does not hold GPUs until its time limit.
// It also releases an idle one (the policy's [interactive] idle_timeout): a running allocation
// with no session input or output (SessionRelay), CPU use below idle_cpu_below and GPU
// utilization, where measured, below idle_gpu_below (UsageBook) for idle_timeout is cancelled, its clients warned idle_warning before on their watch.
// Watches live in memory and die with schedd: after a restart or failover every live interactive
// job without a watch gets the grace (AdoptUnwatched, at start and every kAdoptEvery), in which
// its clients, which open their watch again, come back; a job whose client died meanwhile is
// cancelled.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "mlsched/v1/jobs.grpc.pb.h"
#include "schedd/server/controller.h"
#include "schedd/server/session_relay.h"
#include "schedd/server/usage_book.h"

namespace mlsched::server {

class AllocationWatch {
 public:
  struct Limits {
    std::chrono::seconds grace{60};  // schedd --interactive-client-grace
    size_t max_per_user = 32;        // watches one uid holds at once
    std::chrono::milliseconds idle_check{2000};  // between two looks at the watched jobs' use
  };
  /// Starts the thread that cancels jobs whose grace ran out.
  AllocationWatch(Controller& ctl, Limits limits);
  ~AllocationWatch();
  AllocationWatch(const AllocationWatch&) = delete;
  AllocationWatch& operator=(const AllocationWatch&) = delete;

  /// The reactor of one WatchAllocation call by `caller`: refused (finished at once) for a job
  /// that is unknown (NOT_FOUND), another user's (PERMISSION_DENIED), ended (FAILED_PRECONDITION)
  /// or over the caller's limit (RESOURCE_EXHAUSTED); else it sends the grace once and stays open.
  grpc::ServerWriteReactor<v1::WatchAllocationEvent>* Watch(const v1::WatchAllocationRequest& req, const Caller& caller);
  /// A reactor that finishes at once with `status` (refusals before Watch, e.g. authentication).
  static grpc::ServerWriteReactor<v1::WatchAllocationEvent>* Refuse(grpc::Status status);
  /// Jobs with an open watch now.
  size_t Watched();
  /// Between two looks for interactive jobs that nobody watches (after a failover).
  static constexpr std::chrono::seconds kAdoptEvery{30};
  /// Where the idle release learns of a job's use (not owned; either may be null; before serving).
  void SetActivitySources(SessionRelay* sessions, UsageBook* usage) {
    sessions_ = sessions;
    usage_ = usage;
  }
  /// Ends the reaper thread (idempotent). Call after the server stopped.
  void Stop();

 private:
  class Live;
  void Released(Live* live, int64_t job_id, uint32_t uid);
  void ReaperLoop();
  /// Gives every pending or running interactive job with neither a watch nor a deadline the grace.
  void AdoptUnwatched();
  /// Cancels the jobs whose clients went away more than the grace ago.
  void CancelAbandoned(std::vector<int64_t> due);
  /// One look at every watched job's use: warns the idle, releases those idle for idle_timeout.
  void CheckIdle();
  /// Sends `event` to every open watch of `job_id`.
  void Tell(int64_t job_id, const v1::WatchAllocationEvent& event);

  struct Idle {
    std::chrono::steady_clock::time_point last_active;  // the latest use seen
    bool warned = false;
  };

  Controller& ctl_;
  Limits limits_;
  SessionRelay* sessions_ = nullptr;
  UsageBook* usage_ = nullptr;
  std::map<int64_t, std::vector<Live*>> live_;  // job -> its open watches (under mu_)
  std::map<int64_t, Idle> idle_;                 // watched running jobs (reaper thread only)
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, int> watchers_;                                   // job -> open watches
  std::map<int64_t, std::chrono::steady_clock::time_point> deadline_;  // job -> cancel at
  std::map<uint32_t, size_t> per_user_;
  bool stopping_ = false;
  std::thread reaper_;
};

}  // namespace mlsched::server
