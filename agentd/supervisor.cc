#include "agentd/supervisor.h"
#include "agentd/container_tools.h"

#include "agentd/orphans.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <algorithm>
#include <cstring>
#include <set>
#include <system_error>
#include <thread>

namespace mlsched::agent {

ProcessSupervisor::ProcessSupervisor(StartedFn on_started, ExitedFn on_exited, bool adopt_orphans)
    : on_started_(std::move(on_started)), on_exited_(std::move(on_exited)), adopt_orphans_(adopt_orphans) {}

ProcessSupervisor::~ProcessSupervisor() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void ProcessSupervisor::Start() {
  if (started_) return;
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  if (adopt_orphans_ && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    throw std::system_error(errno, std::generic_category(), "prctl(PR_SET_CHILD_SUBREAPER)");
  started_ = true;
  if (!on_caller_) thread_ = std::thread([this] { Loop(); });
}

void ProcessSupervisor::Run() {
  if (!on_caller_ || !started_) return;
  Loop();
  std::lock_guard lk(mu_);
  loop_done_ = true;
  loop_cv_.notify_all();
}

void ProcessSupervisor::WaitLoop() {
  if (thread_.joinable()) {
    thread_.join();
    return;
  }
  std::unique_lock lk(mu_);
  loop_cv_.wait(lk, [&] { return loop_done_; });
}

std::string ProcessSupervisor::Adopt(const TaskKey& key, pid_t pid, int64_t max_rss_bytes,
                                     std::shared_ptr<ContainerLaunch> /*container: the container driver's*/) {
  if (ParentPid(pid) != getpid())
    return "pid " + std::to_string(pid) + " is not a child of this agentd (pid " + std::to_string(getpid()) + ")";
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno);
  std::unique_ptr<TaskCgroup> cgroup = cgroups_ ? cgroups_->Attach(key) : nullptr;
  std::string where = cgroup ? ", cgroup " + cgroup->Dir() : "";
  {
    std::lock_guard lk(mu_);
    if (children_.count(key)) {
      close(pidfd);
      return "task " + key.ToString() + " is already supervised";
    }
    children_[key] = Child{pid, pidfd, std::nullopt, std::move(cgroup), max_rss_bytes};
  }
  spdlog::info("task {}: pid {} adopted after a reload{}", key.ToString(), pid, where);
  if (wake_fd_ >= 0) Wake();
  return "";
}

void ProcessSupervisor::Detach() {
  {
    std::lock_guard lk(mu_);
    if (!started_ || stopped_ || detaching_) return;
    detaching_ = true;
  }
  Wake();
  WaitLoop();
  std::lock_guard lk(mu_);
  for (auto& [k, c] : children_) {
    close(c.pidfd);
    c.pidfd = -1;
  }
}

void ProcessSupervisor::Wake() {
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof one);
  (void)n;
}

bool ProcessSupervisor::Spawn(const TaskKey& key, LaunchRequest request) {
  {
    std::lock_guard lk(mu_);
    if (stopping_ || children_.count(key)) return false;
    for (const auto& q : queue_)
      if (q.key == key) return false;
    queue_.push_back({key, std::move(request)});
  }
  Wake();
  return true;
}

bool ProcessSupervisor::Terminate(const TaskKey& key, std::chrono::milliseconds grace) {
  std::unique_lock lk(mu_);
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->key != key) continue;
    queue_.erase(it);
    lk.unlock();
    on_exited_(key, 0, ExitReport{128 + SIGTERM, true, ""});
    idle_cv_.notify_all();
    return true;
  }
  auto it = children_.find(key);
  if (it == children_.end()) return false;
  kill(-it->second.pid, SIGTERM);
  auto deadline = Clock::now() + grace;
  if (!it->second.kill_at || deadline < *it->second.kill_at) it->second.kill_at = deadline;
  lk.unlock();
  Wake();
  return true;
}

bool ProcessSupervisor::Signal(const TaskKey& key, int signal) {
  std::lock_guard lk(mu_);
  auto it = children_.find(key);
  if (it == children_.end()) return false;
  return kill(-it->second.pid, signal) == 0;
}

void ProcessSupervisor::TerminateAll(std::chrono::milliseconds grace) {
  std::vector<TaskKey> keys;
  {
    std::lock_guard lk(mu_);
    for (const auto& q : queue_) keys.push_back(q.key);
    for (const auto& [k, c] : children_) keys.push_back(k);
  }
  for (const auto& k : keys) Terminate(k, grace);
}

std::vector<RunningTaskInfo> ProcessSupervisor::Running() const {
  std::lock_guard lk(mu_);
  std::vector<RunningTaskInfo> out;
  for (const auto& [k, c] : children_) {
    RunningTaskInfo r{k, c.pid, c.cgroup ? c.cgroup->CpuUsec() : ProcessCpuUsec(c.pid)};
    if (c.cgroup) {
      r.rss_bytes = c.cgroup->Memory().rss;
      c.max_rss = std::max(c.max_rss, r.rss_bytes);
      r.max_rss_bytes = c.max_rss;
      r.processes = static_cast<int32_t>(c.cgroup->Pids().size());
    }
    out.push_back(r);
  }
  for (const auto& [k, pid] : reporting_) out.push_back({k, pid, std::nullopt});
  return out;
}

size_t ProcessSupervisor::Size() const {
  std::lock_guard lk(mu_);
  return children_.size() + queue_.size() + launching_ + reporting_.size();
}

bool ProcessSupervisor::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return idle_cv_.wait_for(lk, timeout, [&] { return children_.empty() && queue_.empty() && launching_ == 0 && reporting_.empty(); });
}

void ProcessSupervisor::Stop() {
  {
    std::lock_guard lk(mu_);
    if (!started_ || stopped_ || detaching_) return;
    stopped_ = true;
    stopping_ = true;
    for (auto& [k, c] : children_) {
      kill(-c.pid, SIGKILL);
      c.kill_at = Clock::now();
    }
  }
  Wake();
  WaitLoop();
  if (adopt_orphans_) ReapOrphans();
  for (int i = 0; i < 200 && !unremoved_.empty(); ++i) {  // up to 2 s for killed processes to go
    RetryCgroupRemovals();
    if (!unremoved_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const auto& cg : unremoved_) spdlog::warn("cgroup {} could not be removed: processes remain", cg->Dir());
  unremoved_.clear();
  if (adopt_orphans_) {
    ReapOrphans();
    prctl(PR_SET_CHILD_SUBREAPER, 0);
  }
}

int ProcessSupervisor::PollTimeoutMs() const {
  std::optional<Clock::time_point> next;
  for (const auto& [k, c] : children_)
    if (c.kill_at && (!next || *c.kill_at < *next)) next = c.kill_at;
  int cap = adopt_orphans_ || !unremoved_.empty() ? 500 : -1;  // orphans and busy cgroups are polled
  if (!next) return cap;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
  int timeout = ms < 0 ? 0 : static_cast<int>(ms) + 1;
  return cap < 0 ? timeout : std::min(timeout, cap);
}

SpawnResult ProcessSupervisor::LaunchOne(const Queued& q, std::unique_ptr<TaskCgroup>* cgroup, int* pidfd) {
  SpawnResult r;
  if (cgroups_) {
    auto cg = cgroups_->Create(q.key, q.request.limits);
    if (!cg) {
      r.failure = {127, false, cg.error};
      return r;
    }
    *cgroup = std::move(*cg.value);
  }
  r = SpawnTask(q.request, *cgroup ? (*cgroup)->JoinFds() : std::span<const int>{});
  if (*cgroup) (*cgroup)->CloseJoinFds();
  *pidfd = r.pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, r.pid, 0)) : -1;
  if (r.pid > 0 && *pidfd < 0) {  // cannot watch it: do not leave it running unsupervised
    int err = errno;
    kill(-r.pid, SIGKILL);
    int status = 0;
    waitpid(r.pid, &status, 0);
    r.failure = {127, false, std::string("pidfd_open: ") + std::strerror(err)};
    r.pid = -1;
  }
  if (r.pid <= 0 && *cgroup) {  // the child is gone (reaped): clean its cgroup
    ExitReport ignored;
    FinishCgroup(q.key, std::move(*cgroup), &ignored);
  }
  return r;
}

void ProcessSupervisor::LaunchQueued(std::deque<Queued> batch) {
  for (auto& q : batch) {
    std::unique_ptr<TaskCgroup> cgroup;
    int pidfd = -1;
    SpawnResult r = LaunchOne(q, &cgroup, &pidfd);
    q.request.inherit_fd.reset();  // the task has its own copy now (or failed): the agent's closes
    if (r.pid <= 0) {
      spdlog::warn("task {}: launch failed: {}", q.key.ToString(), r.failure.error);
      on_exited_(q.key, 0, r.failure);
      {
        std::lock_guard lk(mu_);
        --launching_;
      }
      idle_cv_.notify_all();
      continue;
    }
    std::string where = cgroup ? ", cgroup " + cgroup->Dir() : "";
    {
      std::lock_guard lk(mu_);
      --launching_;
      children_[q.key] =
          Child{r.pid, pidfd, stopping_ ? std::optional(Clock::now()) : std::nullopt, std::move(cgroup)};
      if (stopping_) kill(-r.pid, SIGKILL);
    }
    spdlog::info("task {}: started pid {} ({}{})", q.key.ToString(), r.pid, q.request.executable, where);
    on_started_(q.key, r.pid);
  }
}

void ProcessSupervisor::FinishCgroup(const TaskKey& key, std::unique_ptr<TaskCgroup> cg, ExitReport* report) {
  int64_t kills = cg->OomKills();
  // The final figures, before the cgroup goes (its counters include every exited process).
  report->cpu_usec = cg->CpuUsec();
  const TaskCgroup::MemoryUse mem = cg->Memory();
  report->max_rss_bytes = std::max(report->max_rss_bytes, mem.rss);
  report->memory_peak_bytes = mem.peak;
  report->oom_kills = kills;
  // A SIGKILL at the memory limit with no kill counted here: a container's process, counted in the
  // runtime's own cgroup below this one (cgroups.h HitMemoryLimit).
  if (kills == 0 && report->exit_code == 128 + SIGKILL && cg->HitMemoryLimit()) kills = 1;
  if (kills > 0 && cg->MemoryLimit() > 0) {
    if (report->exit_code != 0) report->error = OutOfMemoryError(cg->MemoryLimit(), kills);
    spdlog::warn("task {}: the kernel's OOM killer ended {} process(es) at the {} byte limit", key.ToString(), kills,
                 cg->MemoryLimit());
  }
  cg->KillAll();  // whatever is left: daemons that left the process group, forged environments
  for (int i = 0; i < 20 && !cg->Pids().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!cg->Remove()) unremoved_.push_back(std::move(cg));
}

void ProcessSupervisor::RetryCgroupRemovals() {
  std::erase_if(unremoved_, [](auto& cg) {
    cg->KillAll();
    return cg->Remove();
  });
}

void ProcessSupervisor::ReapReady(const std::vector<TaskKey>& ready) {
  for (const auto& key : ready) {
    pid_t pid = 0;
    int status = 0;
    int64_t max_rss = -1;
    std::unique_ptr<TaskCgroup> cgroup;
    {
      std::lock_guard lk(mu_);
      auto it = children_.find(key);
      if (it == children_.end()) continue;
      pid = it->second.pid;
      // The leader is a zombie, so its pid (= the group id) cannot be reused yet: kill what the
      // task left behind in its process group before reaping it.
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      close(it->second.pidfd);
      max_rss = it->second.max_rss;
      cgroup = std::move(it->second.cgroup);
      children_.erase(it);
      reporting_[key] = pid;
    }
    ExitReport report = DecodeWaitStatus(status);
    report.max_rss_bytes = max_rss;
    if (cgroup) FinishCgroup(key, std::move(cgroup), &report);
    spdlog::info("task {}: pid {} exited with {}{}{}", key.ToString(), pid, report.exit_code,
                 report.signaled ? " (signal)" : "", report.error.empty() ? "" : ": " + report.error);
    on_exited_(key, pid, report);
    std::lock_guard lk(mu_);
    reporting_.erase(key);
  }
  idle_cv_.notify_all();
}

void ProcessSupervisor::EscalateDue() {
  std::vector<TaskCgroup*> cgroups;  // killed outside the lock; only this thread removes children
  {
    std::lock_guard lk(mu_);
    auto now = Clock::now();
    for (auto& [k, c] : children_) {
      if (!c.kill_at || *c.kill_at > now) continue;
      spdlog::info("task {}: grace period over, SIGKILL to process group {}{}", k.ToString(), c.pid,
                   c.cgroup ? " and cgroup " + c.cgroup->Dir() : "");
      kill(-c.pid, SIGKILL);
      if (c.cgroup) cgroups.push_back(c.cgroup.get());
      c.kill_at.reset();
    }
  }
  for (auto* cg : cgroups) cg->KillAll();
}

void ProcessSupervisor::ReapOrphans() {
  std::set<pid_t> tasks;
  std::set<TaskKey> running;
  {
    std::lock_guard lk(mu_);
    for (const auto& [k, c] : children_) {
      tasks.insert(c.pid);
      running.insert(k);
    }
  }
  std::set<pid_t> unknown;
  for (pid_t pid : ListChildren()) {
    if (tasks.count(pid)) continue;  // a task leader: reaped through its pidfd
    if (IsHelperProcess(pid)) continue;  // skopeo or umoci, reaped by RunTool
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) continue;  // an orphan that already ended
    // With cgroups, membership says whose it is; the environment could be forged.
    auto owner = cgroups_ ? cgroups_->TaskOf(pid) : TaskOfProcess(pid);
    if (owner && running.count(*owner)) continue;  // its task still runs: it may keep helpers
    if (!owner && !cgroups_ && !unknown_orphans_.count(pid)) {
      unknown.insert(pid);  // maybe caught inside execve: looked at again at the next scan
      continue;
    }
    spdlog::info("killing pid {} left behind by {}", pid, owner ? "task " + owner->ToString() : "an unknown task");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  unknown_orphans_.swap(unknown);
}

void ProcessSupervisor::Loop() {
  for (;;) {
    std::deque<Queued> batch;
    std::vector<pollfd> fds;
    std::vector<TaskKey> keys;
    int timeout = -1;
    {
      std::lock_guard lk(mu_);
      if (stopping_ && children_.empty() && launching_ == 0) break;
      if (detaching_ && queue_.empty()) break;  // queued launches first: their commits were taken
      batch.swap(queue_);
      launching_ += batch.size();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (const auto& [k, c] : children_) {
        fds.push_back({c.pidfd, POLLIN, 0});
        keys.push_back(k);
      }
      timeout = batch.empty() ? PollTimeoutMs() : 0;
    }
    if (!batch.empty()) {
      LaunchQueued(std::move(batch));
      continue;  // new children: rebuild the poll set
    }
    int n = poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) spdlog::error("supervisor poll: {}", std::strerror(errno));
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      while (read(wake_fd_, &v, sizeof v) > 0) {
      }
    }
    std::vector<TaskKey> ready;
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ready.push_back(keys[i - 1]);
    ReapReady(ready);
    EscalateDue();
    if (adopt_orphans_) ReapOrphans();
    RetryCgroupRemovals();
  }
}

}  // namespace mlsched::agent
