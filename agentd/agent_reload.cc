// Agent: the reload in place (reload_state.h). The old image ends every thread but the task
// driver's loop, which ends without touching the tasks, and writes the state file; agentd's main
// thread then execs the binary; the new image's Start() reads the file, plans the attempts again
// from their Prepares and hands the tasks, still its children, to the driver.
#include "agentd/agent.h"
#include "agentd/image_cache.h"
#include "agentd/safe_files.h"
#include "agentd/session_host.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace mlsched::agent {

std::optional<ReloadState> Agent::TakeReloadState() {
  const std::string path = cfg_.work_dir + "/" + kReloadStateFileName;
  const char* env = std::getenv(kReloadStateEnv);
  const bool expected = env != nullptr && path == env;
  unsetenv(kReloadStateEnv);  // not for the tasks, nor for a later exec
  if (!expected) {
    if (unlink(path.c_str()) == 0) spdlog::warn("removed {} (a reload that did not happen)", path);
    return std::nullopt;
  }
  // The previous image wrote it in the agent's own directory; read it all the same as any file:
  // no symlink, no FIFO, bounded, and only as this user's private file.
  std::string text;
  struct stat st{};
  std::string error = ReadRegularFileAt(cfg_.work_dir, kReloadStateFileName, kMaxReloadStateBytes, &text, &st);
  if (error.empty() && (st.st_uid != geteuid() || (st.st_mode & 077) != 0))
    error = "not a file of this agentd's user with mode 0600";
  unlink(path.c_str());
  Parsed<ReloadState> state;
  if (error.empty()) state = ParseReloadState(text);
  if (error.empty() && !state) error = state.error;
  if (!error.empty()) {
    spdlog::error("reload state {}: {}; the tasks of the previous image are not adopted", path, error);
    return std::nullopt;
  }
  spdlog::info("reloaded in place: {} task(s) of {} attempt(s) to adopt", state.value->tasks.size(),
               state.value->attempts.size());
  return std::move(state.value);
}

void Agent::AdoptReloaded(const ReloadState& state) {
  std::map<AttemptKey, std::set<int32_t>> live;
  for (const auto& t : state.tasks) live[t.key.Attempt()].insert(t.key.rank);
  std::set<AttemptKey> planned;
  for (const auto& a : state.attempts) {
    v1::Prepare p;
    std::string error;
    if (!p.ParseFromString(a.prepare) || p.job_id() != a.key.job_id || p.attempt() != a.key.attempt) {
      error = "its Prepare does not parse or names another attempt";
    } else if (auto plan = PlanAttempt(p, plan_ctx_); !plan) {
      error = plan.error;
    } else {
      plan.value->prepare = a.prepare;
      std::shared_ptr<const CachedImage> image;  // the container's image, pinned again
      if (!a.image_digest.empty()) {
        image = images_ ? images_->Find(a.image_digest) : nullptr;
        if (!image) error = "its image " + a.image_digest + " is not in the node's image cache";
      }
      for (auto& r : plan.value->ranks) {
        if (r.request.container && !image && error.empty()) error = "it runs in an image, but no digest was handed over";
        if (r.request.container) r.request.container->image = image;
      }
      if (error.empty()) error = attempts_.Restore(std::move(*plan.value), live[a.key], a.master_port);
      if (error.empty() && image) {
        std::lock_guard lk(pull_mu_);
        pulled_[a.key] = image;  // as a commit leaves it: dropped when the attempt ends
      }
    }
    if (error.empty()) planned.insert(a.key);
    else spdlog::error("job {}: cannot plan the attempt again after the reload: {}; its tasks are killed", a.key.ToString(), error);
  }
  for (const auto& t : state.tasks) {
    std::shared_ptr<ContainerLaunch> container;
    if (planned.count(t.key.Attempt()))
      if (auto req = attempts_.LiveRequest(t.key)) container = req->container;
    if (std::string err = driver_->Adopt(t.key, t.pid, t.max_rss_bytes, container); !err.empty()) {
      spdlog::error("task {}: not adopted after the reload: {}", t.key.ToString(), err);
      OnTaskExited(t.key, ExitReport{128 + SIGKILL, true, "lost in agentd's reload: " + err});
      continue;
    }
    if (!planned.count(t.key.Attempt())) driver_->Terminate(t.key, std::chrono::milliseconds(0));
  }
}

std::string Agent::Reload() {
  if (!cfg_.tasks_on_caller) return "this agent's tasks are not run from its main thread";
  if (!started_ || stopping_) return "agentd is stopping";
  for (const auto& a : attempts_.CommittedAttempts())
    if (a.container && a.image_digest.empty())
      return "job " + a.key.ToString() + " runs in a container whose image is not pinned";
  if (size_t n = sessions_->Running())
    return std::to_string(n) + " interactive session(s) run here (their terminals live in this process)";
  spdlog::info("reloading in place: ending the stream and the threads, the tasks keep running");
  stopping_ = true;
  if (eviction_) eviction_->Stop();
  {
    std::lock_guard lk(mu_);
    cv_.notify_all();
    CancelCurrent();
  }
  if (cutoff_.joinable()) cutoff_.join();
  if (session_.joinable()) session_.join();  // no prepare, commit or signal comes in from now on
  if (images_) images_->Cancel();
  {
    std::unique_lock lk(pull_mu_);
    auto pulls = std::move(pull_threads_);
    auto stacks = std::move(stack_threads_);
    pull_cv_.notify_all();
    lk.unlock();
    for (auto& t : pulls) t.first.join();
    for (auto& t : stacks) t.first.join();
  }
  sessions_->Stop();
  progress_.Stop();
  health_->Stop();
  // Prepared attempts end here (their rendezvous sockets close with this image): schedd settles
  // them at the new registration, as after any lost stream.
  for (const auto& key : attempts_.PreparedNotIn({})) DropPrepared(key, "agentd reloads in place");
  driver_->Detach();
  // No way back from here (the threads are gone): the exec follows. Without the state file the new
  // image adopts nothing and kills what is left, as after a crash.
  reload_pending_ = true;
  if (std::string err = WriteReloadState(); !err.empty()) {
    spdlog::error("reload: {}; the tasks are lost", err);
    return err;
  }
  return "";
}

std::string Agent::WriteReloadState() {
  ReloadState state;
  {
    std::lock_guard lk(mu_);
    if (!connected_) {
      state.disconnected_since_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(disconnected_since_.time_since_epoch()).count();
    }
  }
  std::set<AttemptKey> with_tasks;
  for (const auto& r : driver_->Running()) {
    if (r.pid <= 0) continue;
    state.tasks.push_back({r.key, r.pid, r.max_rss_bytes});
    with_tasks.insert(r.key.Attempt());
  }
  for (auto& a : attempts_.CommittedAttempts())
    if (with_tasks.count(a.key)) state.attempts.push_back({a.key, a.master_port, a.image_digest, std::move(a.prepare)});
  std::set<AttemptKey> listed;
  for (const auto& a : state.attempts) listed.insert(a.key);
  std::erase_if(state.tasks, [&](const ReloadState::Task& t) {
    if (listed.count(t.key.Attempt())) return false;
    spdlog::error("task {} (pid {}) has no committed attempt here: not handed over", t.key.ToString(), t.pid);
    return true;
  });
  const std::string text = FormatReloadState(state);
  const std::string path = cfg_.work_dir + "/" + kReloadStateFileName;
  unlink(path.c_str());
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  size_t put = 0;
  while (put < text.size()) {
    ssize_t n = write(fd, text.data() + put, text.size() - put);
    if (n <= 0) break;
    put += static_cast<size_t>(n);
  }
  close(fd);
  if (put != text.size()) return "cannot write " + path + ": " + std::strerror(errno);
  spdlog::info("reload: {} task(s) of {} attempt(s) handed over in {}", state.tasks.size(), state.attempts.size(), path);
  return "";
}

}  // namespace mlsched::agent
