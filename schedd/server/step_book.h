// StepBook: the steps of running jobs (srun's JOB.STEP), a component beside the Controller. A
// step is `ntasks` processes of one command that mlrun starts in a running job, each an
// interactive session (SessionRelay) naming the step and its task; a session naming none is a
// one-task step of its own. The book hands out step ids per job (0, 1, ...), follows each task
// from its session's start to its exit, and writes every step through the Store when it starts and
// when it ends, so `mlq --steps` and accounting list steps after the job or schedd are gone.
// A step ends when all its tasks exited; one whose tasks never all started ends kJoinTimeout after
// its start once none runs; a step left RUNNING in the store by an earlier schedd (its sessions
// died with it) or whose job ended is ended when next seen (CANCELLED).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "schedd/server/controller.h"
#include "schedd/server/store.h"

namespace mlsched::server {

class StepBook {
 public:
  /// How long after a step's start its missing tasks may still join.
  static constexpr std::chrono::seconds kJoinTimeout{60};
  /// Least time between two sweeps for steps that can no longer finish (one listing each).
  static constexpr std::chrono::seconds kSweepEvery{5};
  /// Most steps one List (JobService.ListSteps answer) gives: 10,000 rows of ~100 bytes.
  static constexpr size_t kMaxListedSteps = 10000;

  StepBook(Store& store, Controller& ctl);

  /// A new step of running job `job` with `ntasks` tasks (1..the job's world size) named after
  /// argv[0]'s base name, started by `caller` (who may act on the job: the caller checks). Written
  /// to the store before it returns. Errors: INVALID_ARGUMENT (ntasks), RESOURCE_EXHAUSTED (the
  /// job has kMaxStepsPerJob steps), UNAVAILABLE (the store failed).
  grpc::Status Start(const v1::JobInfo& job, const Caller& caller, int32_t ntasks, const std::string& argv0,
                     int32_t* step_id);
  /// Task `task` of step `step_id` of `job_id` starts on `node`: the step runs and was started by
  /// the same uid (or `caller` is privileged), the task is below its ntasks and not started yet.
  /// FAILED_PRECONDITION otherwise.
  grpc::Status Join(int64_t job_id, int32_t step_id, int32_t task, const Caller& caller, const std::string& node);
  /// A task's session ended: `exit_code` (128 + signal when `signaled`), or `error` when the
  /// process never started or the session broke (kSessionLostPrefix: NODE_FAIL); what its
  /// processes used as its agent reported it (`cpu_usec` microseconds, `max_rss` bytes; -1 =
  /// unknown; clamped).
  void TaskEnded(int64_t job_id, int32_t step_id, int32_t task, int32_t exit_code, bool signaled, const std::string& error,
                 int64_t cpu_usec = -1, int64_t max_rss = -1);
  /// The steps of these jobs (those running now with their live state), by job and step id;
  /// OUT_OF_RANGE when they have more than kMaxListedSteps (nothing larger is read).
  grpc::Status List(const std::vector<int64_t>& job_ids, std::vector<StepRow>* out);
  /// Steps running now (for tests and metrics).
  size_t Running();

 private:
  struct Live {
    StepRow row;
    std::vector<std::string> nodes;  // per task; "" until it joins
    std::set<int32_t> joined, ended;
    bool failed = false, signaled = false, lost = false;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  };
  using Key = std::pair<int64_t, int32_t>;
  /// Ends `s` now (state from its tasks, or `state` when given); returns the row to write.
  static StepRow Finish(Live& s, const std::string& state, int64_t now);
  /// Ends the live steps that can no longer finish (job not running, tasks never joined); returns
  /// the rows to write (requires mu_).
  std::vector<StepRow> SweepLocked(int64_t now);
  void Write(const std::vector<StepRow>& rows);

  Store& store_;
  Controller& ctl_;
  int64_t created_;  // wall clock (s) when this book began: older RUNNING rows are an earlier schedd's
  std::mutex mu_;
  std::map<Key, Live> live_;
  std::map<int64_t, int32_t> next_;  // job -> next step id (loaded from the store at first use)
  std::chrono::steady_clock::time_point last_sweep_{};
};

}  // namespace mlsched::server
