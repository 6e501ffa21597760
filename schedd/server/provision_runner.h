// Runs the provisioning programs of the policy's [provisioning.POOL] (Slurm's ResumeProgram and
// SuspendProgram): fork/exec of an absolute path from the admin's policy file, never through a
// shell, with the hostlist as argv[1], the node shape in the environment, stdout and stderr to
// schedd's log, and a timeout after which the program's process group is killed. One worker
// thread runs the programs in order, so the controller never waits for them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace mlsched::server {

/// Bytes of a program's output kept for the log (the rest is read and dropped).
inline constexpr size_t kMaxProgramOutput = 64 << 10;
/// Programs waiting to run; more are refused (logged, counted as failed) until the queue drains.
inline constexpr size_t kMaxQueuedPrograms = 256;

/// One program run: `program hostlist` with `env` added to schedd's environment.
struct ProgramCall {
  std::string kind;      // "resume" or "suspend" (for the log)
  std::string program;   // absolute path
  std::string hostlist;  // argv[1], e.g. "spot-p[1-2]"
  std::map<std::string, std::string> env;
  int timeout_s = 300;   // killed (SIGKILL to its process group) after this
};

/// How a program ended: exit code (128 + signal when killed), whether it timed out, its output.
struct ProgramResult {
  int exit_code = -1;
  bool timed_out = false;
  std::string output;    // stdout and stderr together, at most kMaxProgramOutput bytes
  std::string error;     // why it could not be started ("" when it ran)
};

/// Runs `call` now and waits for it (at most call.timeout_s seconds plus a moment). Thread-safe.
ProgramResult RunProgram(const ProgramCall& call);

class ProvisionRunner {
 public:
  /// `on_done` (optional) sees every finished call, on the worker thread.
  explicit ProvisionRunner(std::function<void(const ProgramCall&, const ProgramResult&)> on_done = {});
  /// Waits for the program running now (at most its timeout); queued ones are dropped.
  ~ProvisionRunner();
  /// Queues `call`; false (and nothing queued) when kMaxQueuedPrograms are waiting.
  bool Submit(ProgramCall call);
  /// Blocks until the queue is empty and nothing runs (tests).
  void Drain();

 private:
  void Loop();
  std::function<void(const ProgramCall&, const ProgramResult&)> on_done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ProgramCall> queue_;
  bool running_ = false, stop_ = false;
  std::thread worker_;
};

}  // namespace mlsched::server
