#include "agentd/container_driver.h"
#include "agentd/container_exec.h"

#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include "agentd/image_cache.h"
#include "agentd/safe_files.h"

namespace mlsched::agent {
namespace {

std::string KeyName(const TaskKey& key) {
  return std::to_string(key.job_id) + "." + std::to_string(key.attempt) + "." + std::to_string(key.rank);
}

// The task a file of the state directory belongs to: runc's state "mlsched-<key>", the logs
// "<key>.log" and "<key>.exec.log".
std::string StateOwner(std::string name) {
  if (name.rfind("mlsched-", 0) == 0) name.erase(0, 8);
  for (const std::string suffix : {".exec.log", ".log"})
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      name.resize(name.size() - suffix.size());
      break;
    }
  return name;
}

std::string EnvName(const std::string& kv) { return kv.substr(0, kv.find('=')); }

// Appends `dir` to the colon-separated variable `name` in `env` (set to `fallback` + dir when
// absent), unless it is there already.
void AppendToPathVar(std::vector<std::string>& env, const std::string& name, const std::string& dir,
                     const std::string& fallback) {
  for (auto& kv : env) {
    if (EnvName(kv) != name) continue;
    const std::string value = ":" + kv.substr(name.size() + 1) + ":";
    if (value.find(":" + dir + ":") == std::string::npos) kv += (kv.size() == name.size() + 1 ? "" : ":") + dir;
    return;
  }
  env.push_back(name + "=" + fallback + dir);
}

// Where the init (tini-static) is bound in every container.
constexpr const char* kContainerInit = "/.mlsched-init";

}  // namespace

std::vector<OciDevice> GpuDevices(const std::vector<std::string>& gpu_paths) {
  std::vector<OciDevice> out;
  std::vector<std::string> paths = gpu_paths;
  if (!paths.empty())
    for (const char* c : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) paths.push_back(c);
  for (const auto& p : paths) {
    struct stat st{};
    if (stat(p.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    out.push_back({p, static_cast<int64_t>(major(st.st_rdev)), static_cast<int64_t>(minor(st.st_rdev)), 0666});
  }
  return out;
}

ContainerDriver::ContainerDriver(ContainerTools tools, std::string state_dir,
                                 const std::function<std::unique_ptr<TaskDriver>(StartedFn, ExitedFn)>& make_inner,
                                 StartedFn on_started, ExitedFn on_exited)
    : tools_(std::move(tools)), state_dir_(std::move(state_dir)), on_exited_(std::move(on_exited)) {
  inner_ = make_inner(std::move(on_started), [this](const TaskKey& key, pid_t pid, const ExitReport& report) {
    on_exited_(key, pid, report);
    Finished(key);
  });
}

ContainerDriver::~ContainerDriver() {
  Stop();
  std::lock_guard lk(mu_);
  live_.clear();
}

void ContainerDriver::Stop() {
  inner_->Stop();
  EndTeardown();
  std::lock_guard lk(mu_);
  ended_.clear();  // never started (Start not called): torn down here
}

void ContainerDriver::EndTeardown() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  teardown_cv_.notify_all();
  if (teardown_.joinable()) teardown_.join();
}

std::string ContainerDriver::Adopt(const TaskKey& key, pid_t pid, int64_t max_rss_bytes,
                                   std::shared_ptr<ContainerLaunch> container) {
  const std::string dir = state_dir_ + "/bundles/" + KeyName(key);
  struct stat st{};
  if (container && (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)))
    return "its container's bundle " + dir + " is gone";
  if (std::string err = inner_->Adopt(key, pid, max_rss_bytes, nullptr); !err.empty()) return err;
  if (container) {
    std::lock_guard lk(mu_);
    live_[key] = Live{ContainerBundle::Adopt(dir), nullptr, std::move(container)};
  }
  return "";
}

void ContainerDriver::Detach() {
  inner_->Detach();
  EndTeardown();
  // The running containers' bundles belong to the next image now: never torn down by this one,
  // not even by its destructors if the exec fails.
  std::lock_guard lk(mu_);
  for (auto& [key, live] : live_) (void)live.bundle.release();
}

bool ContainerDriver::WaitIdle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!inner_->WaitIdle(timeout)) return false;
  std::unique_lock lk(mu_);
  return teardown_cv_.wait_until(lk, deadline, [&] { return ended_.empty() && tearing_down_ == 0; });
}

void ContainerDriver::TearDownLoop() {
  std::unique_lock lk(mu_);
  for (;;) {
    teardown_cv_.wait(lk, [&] { return stopping_ || !ended_.empty(); });
    if (ended_.empty()) return;  // stopping, nothing left
    auto [key, done] = std::move(ended_.front());
    ended_.pop_front();
    ++tearing_down_;
    lk.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    done = Live{};  // the bundle is unmounted and removed, the user's descriptors closed
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (ms > 1000) spdlog::info("task {}: its container's bundle took {} ms to tear down", key.ToString(), ms);
    lk.lock();
    --tearing_down_;
    teardown_cv_.notify_all();
  }
}

void ContainerDriver::Start() {
  for (const std::string& d : {state_dir_, state_dir_ + "/bundles", state_dir_ + "/runc", state_dir_ + "/logs"}) {
    if (mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create " + d + ": " + std::strerror(errno));
    chmod(d.c_str(), 0700);
  }
  // A previous agent's bundles: their tasks were killed with their cgroups; unmount and remove.
  // Those of tasks adopted after a reload in place stay, with their runtime state and logs.
  std::set<std::string> adopted;
  {
    std::lock_guard lk(mu_);
    for (const auto& [key, live] : live_) adopted.insert(KeyName(key));
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir_ + "/bundles", ec)) {
    if (adopted.count(e.path().filename().string())) continue;
    if (!UnmountBelow(e.path().string())) {
      spdlog::warn("mounts remain below {}; leaving it in place", e.path().string());
      continue;  // never remove through a mount: a staged mount is a user's directory
    }
    RemoveTree(e.path().string());
  }
  for (const char* sub : {"/runc", "/logs"}) {
    if (adopted.empty()) {
      RemoveTree(state_dir_ + sub);
      mkdir((state_dir_ + sub).c_str(), 0700);
      continue;
    }
    for (const auto& e : std::filesystem::directory_iterator(state_dir_ + sub, ec))
      if (!adopted.count(StateOwner(e.path().filename().string()))) RemoveTree(e.path().string());
  }
  if (!teardown_.joinable()) teardown_ = std::thread([this] { TearDownLoop(); });
  inner_->Start();
}

OciTaskSpec ContainerDriver::PlanSpec(const TaskKey& key, const LaunchRequest& r, bool gpu_driver) {
  const ContainerLaunch& c = *r.container;
  OciTaskSpec s;
  s.args = r.argv;
  if (!s.args.empty()) s.args[0] = r.executable;
  // The image's variables win (its PATH, LD_LIBRARY_PATH, CUDA_VERSION, ...) unless the job named
  // them in --container-env; everything else of the task's environment is kept (pyxis).
  std::set<std::string> keep(c.keep_env.begin(), c.keep_env.end());
  std::map<std::string, std::string> image_env;
  if (c.image)
    for (const auto& kv : c.image->env) image_env[EnvName(kv)] = kv;
  std::set<std::string> seen;
  for (const auto& kv : r.env) {
    const std::string name = EnvName(kv);
    seen.insert(name);
    auto it = image_env.find(name);
    s.env.push_back(it != image_env.end() && !keep.count(name) ? it->second : kv);
  }
  for (const auto& [name, kv] : image_env)
    if (!seen.count(name)) s.env.push_back(kv);
  s.cwd = !c.workdir.empty() ? c.workdir : c.image ? c.image->workdir : "/";
  s.uid = r.uid;
  s.gid = r.gid;
  s.groups = r.groups;
  s.umask = r.umask;
  for (const auto& b : c.binds) s.binds.push_back({b.source, b.target, b.read_only});
  s.devices = GpuDevices(c.gpu_devices);
  if (gpu_driver && !c.gpu_devices.empty()) {
    AppendToPathVar(s.env, "LD_LIBRARY_PATH", kContainerDriverLibDir, "");
    AppendToPathVar(s.env, "PATH", kContainerDriverBinDir, std::string(kContainerToolPath) + ":");
  }
  s.cgroups_path = "mlsched-" + KeyName(key);
  return s;
}

std::string ContainerDriver::Prepare(const TaskKey& key, const LaunchRequest& request, LaunchRequest* runc) {
  const auto& c = request.container;
  if (!c->image) return "the image " + c->image_ref + " was not pulled on this node";
  // The user's paths, opened as the user; an optional one (the home) that cannot be is left out.
  // /tmp and /dev/shm go first: a later bind below /tmp (an attempt directory there) stays visible.
  auto fds = std::make_shared<UserFds>();
  OciTaskSpec spec = PlanSpec(key, request, !driver_files_.empty() && !cdi_);
  const std::string bundle_dir = state_dir_ + "/bundles/" + KeyName(key);
  std::vector<OciBind> binds = {{bundle_dir + "/tmp", "/tmp", false}, {tools_.init, kContainerInit, true}};
  std::vector<MountPoint> points = {{kContainerInit, false}};
  if (!c->shm_dir.empty()) binds.push_back({c->shm_dir, "/dev/shm", false});
  spec.args.insert(spec.args.begin(), {kContainerInit, "-g", "--"});  // tini: signals to the task's process group
  for (size_t i = 0; i < c->binds.size(); ++i) {
    const auto& b = c->binds[i];
    if (!b.user_path) {
      binds.push_back(spec.binds[i]);
      points.push_back({b.target, true});
      continue;
    }
    auto one = OpenAsUser({b.source}, request.uid, request.gid, request.groups);
    if (!one) {
      if (b.optional) continue;
      return "container mount " + one.error;
    }
    auto& got = **one.value;
    fds->fds.push_back(got.fds[0]);
    fds->directory.push_back(got.directory[0]);
    got.fds.clear();
    binds.push_back({bundle_dir + "/mnt/" + std::to_string(fds->fds.size() - 1), b.target, b.read_only});
    points.push_back({b.target, fds->directory.back()});
  }
  if (!c->gpu_devices.empty() && !cdi_)
    for (const auto& f : driver_files_) {  // root-owned host files (CheckDriverFile), read-only
      binds.push_back({f.host_path, f.container_path, true});
      points.push_back({f.container_path, false});
    }
  spec.binds = std::move(binds);
  if (!c->gpu_devices.empty() && cdi_) {
    auto cdi = PlanCdi(*cdi_, c->gpu_devices, request.limits.deny_devices);
    if (!cdi) return "CDI: " + cdi.error;
    ApplyCdiPlan(*cdi.value, &spec, &points);
  }
  if (!c->shm_dir.empty())
    if (auto err = MountJobShm(c->shm_dir, request.uid, request.gid); !err.empty()) return "the job's /dev/shm: " + err;
  auto bundle = ContainerBundle::Create(bundle_dir, c->image->rootfs, points, c->writable, request.uid, request.gid);
  if (!bundle) return bundle.error;
  for (size_t i = 0; i < fds->fds.size(); ++i) {
    std::string err;
    if ((*bundle.value)->StageUserMount(fds->fds[i], fds->directory[i], i, &err).empty()) return err;
  }
  spec.rootfs = (*bundle.value)->Rootfs();
  if (request.inherit_fd)  // the launcher moves rank 0's rendezvous socket to 3 (runc --preserve-fds 1)
    for (auto& kv : spec.env)
      if (kv.rfind("MLSCHED_RENDEZVOUS_FD=", 0) == 0) kv = "MLSCHED_RENDEZVOUS_FD=3";
  if (auto err = (*bundle.value)->WriteConfig(BuildOciSpec(spec)); !err.empty()) return err;
  *runc = request;
  runc->container.reset();
  runc->exec_as_root = true;
  runc->executable = tools_.runc;
  runc->search_path.clear();
  runc->argv = {tools_.runc, "--root", state_dir_ + "/runc", "--log", state_dir_ + "/logs/" + KeyName(key) + ".log",
                "run", "--bundle", (*bundle.value)->Dir(), "--no-new-keyring"};
  if (request.inherit_fd) runc->argv.insert(runc->argv.end(), {"--preserve-fds", "1"});
  runc->argv.push_back("mlsched-" + KeyName(key));
  runc->env = {"PATH=" + std::string(kContainerToolPath)};
  std::lock_guard lk(mu_);
  live_[key] = Live{std::move(*bundle.value), std::move(fds), c};
  return "";
}

bool ContainerDriver::Spawn(const TaskKey& key, LaunchRequest request) {
  if (!request.container) return inner_->Spawn(key, std::move(request));
  LaunchRequest runc;
  if (auto err = Prepare(key, request, &runc); !err.empty()) {
    spdlog::warn("task {}: cannot start its container: {}", key.ToString(), err);
    Finished(key);
    on_exited_(key, 0, ExitReport{127, false, "container: " + err});
    return true;
  }
  if (!inner_->Spawn(key, std::move(runc))) {
    Finished(key);
    return false;
  }
  return true;
}

std::string ContainerDriver::PrepareExec(const TaskKey& key, ExecRequest want, ExecPlan* plan) {
  std::string bundle;
  {
    std::lock_guard lk(mu_);
    auto it = live_.find(key);
    if (it == live_.end() || !it->second.bundle) return inner_->PrepareExec(key, std::move(want), plan);
    bundle = it->second.bundle->Dir();
  }
  const ContainerExecSite site{tools_.runc, state_dir_ + "/runc", bundle, "mlsched-" + KeyName(key),
                               state_dir_ + "/logs/" + KeyName(key) + ".exec.log"};
  return PlanContainerExec(site, want, plan);
}

void ContainerDriver::Finished(const TaskKey& key) {
  const std::string log = state_dir_ + "/logs/" + KeyName(key) + ".log";
  unlink(log.c_str());
  unlink((state_dir_ + "/logs/" + KeyName(key) + ".exec.log").c_str());
  std::lock_guard lk(mu_);
  auto it = live_.find(key);
  if (it == live_.end()) return;
  ended_.emplace_back(key, std::move(it->second));
  live_.erase(it);
  teardown_cv_.notify_all();
}

}  // namespace mlsched::agent
