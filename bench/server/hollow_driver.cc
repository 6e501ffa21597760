#include "bench/server/hollow_driver.h"

#include <csignal>
#include <string>

namespace mlsched::bench {

using agent::ExitReport;
using agent::TaskKey;

HollowClock::HollowClock() : thread_([this] { Loop(); }) {}

HollowClock::~HollowClock() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HollowClock::At(Clock::time_point when, std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    events_.push(Event{when, next_seq_++, std::move(fn)});
  }
  cv_.notify_one();
}

void HollowClock::Loop() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (events_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const auto due = events_.top().when;
    if (Clock::now() < due) {
      cv_.wait_until(lk, due);
      continue;
    }
    auto fn = std::move(const_cast<Event&>(events_.top()).fn);
    events_.pop();
    lk.unlock();
    fn();
    lk.lock();
  }
}

std::chrono::milliseconds HollowRunTime(const agent::LaunchRequest& r, std::chrono::milliseconds default_run) {
  const std::string& cmd = r.argv.empty() ? std::string() : r.argv[0];
  const bool sleep = cmd == "sleep" || (cmd.size() > 6 && cmd.compare(cmd.size() - 6, 6, "/sleep") == 0);
  if (r.argv.size() == 2 && sleep) {
    try {
      const double s = std::stod(r.argv[1]);
      if (s >= 0 && s < 86400 * 7) return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
    } catch (const std::exception&) {
    }
  }
  return default_run;
}

struct HollowDriver::State {
  enum class Phase { kQueued, kRunning };
  struct Task {
    Phase phase = Phase::kQueued;
    pid_t pid = 0;
    uint64_t generation = 0;  // which timers still speak for this task
  };
  StartedFn on_started;
  ExitedFn on_exited;
  mutable std::mutex mu;
  std::condition_variable idle;
  std::map<TaskKey, Task> tasks;
  pid_t next_pid = 1000;
  uint64_t next_generation = 1;
  bool stopped = false;

  /// Ends `key` (if `generation` still speaks for it) with `code`; reports outside the lock.
  void Finish(const TaskKey& key, uint64_t generation, int code, bool signaled) {
    pid_t pid = 0;
    bool started = false;
    {
      std::lock_guard lk(mu);
      auto it = tasks.find(key);
      if (stopped || it == tasks.end() || (generation != 0 && it->second.generation != generation)) return;
      pid = it->second.pid;
      started = it->second.phase == Phase::kRunning;
      tasks.erase(it);
    }
    on_exited(key, started ? pid : 0, ExitReport{code, signaled, ""});
    std::lock_guard lk(mu);
    if (tasks.empty()) idle.notify_all();
  }
};

HollowDriver::HollowDriver(StartedFn on_started, ExitedFn on_exited, HollowClock& clock,
                           std::chrono::milliseconds default_run, std::chrono::milliseconds start_delay)
    : state_(std::make_shared<State>()), clock_(clock), default_run_(default_run), start_delay_(start_delay) {
  state_->on_started = std::move(on_started);
  state_->on_exited = std::move(on_exited);
}

HollowDriver::~HollowDriver() { Stop(); }

bool HollowDriver::Spawn(const TaskKey& key, agent::LaunchRequest request) {
  const auto run = HollowRunTime(request, default_run_);
  uint64_t gen;
  {
    std::lock_guard lk(state_->mu);
    if (state_->stopped || state_->tasks.count(key)) return false;
    gen = state_->next_generation++;
    state_->tasks[key] = State::Task{State::Phase::kQueued, state_->next_pid++, gen};
  }
  std::shared_ptr<State> s = state_;
  HollowClock& clock = clock_;
  clock_.At(HollowClock::Clock::now() + start_delay_, [s, key, gen, run, &clock] {
    pid_t pid = 0;
    {
      std::lock_guard lk(s->mu);
      auto it = s->tasks.find(key);
      if (s->stopped || it == s->tasks.end() || it->second.generation != gen) return;
      it->second.phase = State::Phase::kRunning;
      pid = it->second.pid;
    }
    s->on_started(key, pid);
    clock.At(HollowClock::Clock::now() + run, [s, key, gen] { s->Finish(key, gen, 0, false); });
  });
  return true;
}

bool HollowDriver::Terminate(const TaskKey& key, std::chrono::milliseconds) {
  {
    std::lock_guard lk(state_->mu);
    if (!state_->tasks.count(key)) return false;
  }
  std::shared_ptr<State> s = state_;
  clock_.At(HollowClock::Clock::now(), [s, key] { s->Finish(key, 0, 128 + SIGTERM, true); });
  return true;
}

bool HollowDriver::Signal(const TaskKey& key, int signal) {
  {
    std::lock_guard lk(state_->mu);
    auto it = state_->tasks.find(key);
    if (it == state_->tasks.end() || it->second.phase != State::Phase::kRunning) return false;
  }
  if (signal == SIGTERM || signal == SIGINT || signal == SIGKILL) {
    std::shared_ptr<State> s = state_;
    clock_.At(HollowClock::Clock::now(), [s, key, signal] { s->Finish(key, 0, 128 + signal, true); });
  }
  return true;
}

void HollowDriver::TerminateAll(std::chrono::milliseconds grace) {
  std::vector<TaskKey> keys;
  {
    std::lock_guard lk(state_->mu);
    for (const auto& [k, t] : state_->tasks) keys.push_back(k);
  }
  for (const auto& k : keys) Terminate(k, grace);
}

std::vector<agent::RunningTaskInfo> HollowDriver::Running() const {
  std::vector<agent::RunningTaskInfo> out;
  std::lock_guard lk(state_->mu);
  for (const auto& [k, t] : state_->tasks)
    if (t.phase == State::Phase::kRunning) out.push_back({k, t.pid, std::nullopt});
  return out;
}

size_t HollowDriver::Size() const {
  std::lock_guard lk(state_->mu);
  return state_->tasks.size();
}

bool HollowDriver::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(state_->mu);
  return state_->idle.wait_for(lk, timeout, [&] { return state_->tasks.empty(); });
}

void HollowDriver::Stop() {
  std::map<TaskKey, State::Task> left;
  {
    std::lock_guard lk(state_->mu);
    if (state_->stopped) return;
    left.swap(state_->tasks);
  }
  // The remaining tasks end now (as SIGKILLed processes would), reported before the timers go quiet.
  for (const auto& [k, t] : left)
    state_->on_exited(k, t.phase == State::Phase::kRunning ? t.pid : 0, ExitReport{128 + SIGKILL, true, ""});
  std::lock_guard lk(state_->mu);
  state_->stopped = true;
  state_->idle.notify_all();
}

}  // namespace mlsched::bench
