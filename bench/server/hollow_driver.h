// HollowDriver: the TaskDriver of hollow nodes (Kubernetes' kubemark idea): a task "runs" for a
// while and exits 0, without a process, so one process can hold thousands of real agents (the
// Agent protocol code of agentd: registration, heartbeats, the outbox and its acks, prepare,
// commit, abort, fencing) against one schedd. Every hollow driver of a process shares one timer
// thread (HollowClock).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "agentd/task_driver.h"

namespace mlsched::bench {

/// One thread running timed callbacks in due order (a min-heap of deadlines). Thread-safe.
class HollowClock {
 public:
  using Clock = std::chrono::steady_clock;
  HollowClock();
  /// Joins the thread; callbacks not yet due are dropped.
  ~HollowClock();
  HollowClock(const HollowClock&) = delete;
  HollowClock& operator=(const HollowClock&) = delete;
  /// Runs `fn` on the clock's thread at `when` (at once when past).
  void At(Clock::time_point when, std::function<void()> fn);

 private:
  struct Event {
    Clock::time_point when;
    uint64_t seq;  // ties keep their order
    std::function<void()> fn;
    bool operator>(const Event& o) const { return when != o.when ? when > o.when : seq > o.seq; }
  };
  void Loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t next_seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

/// How long hollow tasks run: `sleep N` as the command (argv) runs N seconds; anything else
/// runs `default_run`.
std::chrono::milliseconds HollowRunTime(const agent::LaunchRequest& request, std::chrono::milliseconds default_run);

class HollowDriver final : public agent::TaskDriver {
 public:
  /// Tasks start `start_delay` after Spawn (a fork and exec) and exit 0 after HollowRunTime; a
  /// terminated or signalled (TERM, INT, KILL) task exits at once with 128 + the signal.
  HollowDriver(StartedFn on_started, ExitedFn on_exited, HollowClock& clock, std::chrono::milliseconds default_run,
               std::chrono::milliseconds start_delay = std::chrono::milliseconds(1));
  ~HollowDriver() override;
  void UseCgroups(agent::Cgroups*) override {}
  void Start() override {}
  bool Spawn(const agent::TaskKey& key, agent::LaunchRequest request) override;
  bool Terminate(const agent::TaskKey& key, std::chrono::milliseconds grace) override;
  bool Signal(const agent::TaskKey& key, int signal) override;
  void TerminateAll(std::chrono::milliseconds grace) override;
  std::vector<agent::RunningTaskInfo> Running() const override;
  size_t Size() const override;
  bool WaitIdle(std::chrono::milliseconds timeout) override;
  void Stop() override;

 private:
  struct State;  // shared with the clock's callbacks, which outlive nothing once Stop() ran
  std::shared_ptr<State> state_;
  HollowClock& clock_;
  std::chrono::milliseconds default_run_, start_delay_;
};

}  // namespace mlsched::bench
