#include "agentd/agent.h"
#include "agentd/container_driver.h"
#include "common/container_ref.h"
#include "agentd/rendezvous_port.h"
#include "agentd/safe_files.h"
#include "agentd/session_host.h"
#include "agentd/task_env.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace mlsched::agent {
namespace fs = std::filesystem;
namespace {

v1::Pool PoolOf(const std::string& pool) {
  if (pool == "spot") return v1::POOL_SPOT;
  if (pool == "reserved") return v1::POOL_RESERVED;
  if (pool == "on-demand") return v1::POOL_ON_DEMAND;
  return v1::POOL_UNSPECIFIED;
}

// Running tasks with the progress they last wrote to their status files (read by `progress`'s own
// thread; nullptr = none).
void FillRunning(const std::vector<RunningTaskInfo>& running, const TaskProgressCache* progress,
                 google::protobuf::RepeatedPtrField<v1::RunningTask>* out) {
  for (const auto& r : running) {
    auto* t = out->Add();
    t->set_job_id(r.key.job_id);
    t->set_attempt(r.key.attempt);
    t->set_rank(r.key.rank);
    t->set_pid(r.pid);
    if (r.cpu_usec) t->set_cpu_usec(*r.cpu_usec);
    if (r.rss_bytes >= 0) t->set_rss_bytes(r.rss_bytes);
    if (r.max_rss_bytes >= 0) t->set_max_rss_bytes(r.max_rss_bytes);
    if (r.processes >= 0) t->set_processes(r.processes);
    if (!progress) continue;
    TaskProgress p = progress->Get(r.key);
    t->set_step(p.step);
    t->set_last_checkpoint_time(p.last_checkpoint_unix_s);
    if (p.compute_ms >= 0) t->set_compute_ms(p.compute_ms);
    if (p.gpu_util_percent >= 0) t->set_gpu_util_percent(p.gpu_util_percent);
    if (p.gpu_memory_bytes >= 0) t->set_gpu_memory_bytes(p.gpu_memory_bytes);
    if (p.gpu_power_mw >= 0) t->set_gpu_power_mw(p.gpu_power_mw);
  }
}

v1::AgentMessage TaskExitedMessage(const TaskKey& key, const ExitReport& report) {
  v1::AgentMessage m;
  auto* e = m.mutable_task_exited();
  e->set_job_id(key.job_id);
  e->set_attempt(key.attempt);
  e->set_rank(key.rank);
  e->set_exit_code(report.exit_code);
  e->set_signaled(report.signaled);
  e->set_error(report.error);
  if (report.cpu_usec) e->set_cpu_usec(*report.cpu_usec);
  if (report.max_rss_bytes >= 0) e->set_max_rss_bytes(report.max_rss_bytes);
  if (report.memory_peak_bytes >= 0) e->set_memory_peak_bytes(report.memory_peak_bytes);
  if (report.oom_kills > 0) e->set_oom_kills(report.oom_kills);
  return m;
}

}  // namespace

Agent::Agent(AgentConfig config)
    : Agent(std::move(config), [this](TaskDriver::StartedFn started, TaskDriver::ExitedFn exited) {
        // Called by the constructor below, once cfg_ is set.
        auto driver = std::make_unique<ProcessSupervisor>(std::move(started), std::move(exited), /*adopt_orphans=*/true);
        if (cfg_.tasks_on_caller) driver->RunOnCaller();
        return driver;
      }, true) {}

Agent::Agent(AgentConfig config, const DriverFactory& make_driver, bool containers)
    : cfg_(std::move(config)),
      outbox_(cfg_.work_dir.empty() ? "" : cfg_.work_dir + "/outbox"),
      progress_([this] { return RunningKeys(); },
                [this](const TaskKey& k) { return ReadProgress(k); },
                std::chrono::seconds(1)) {
  plan_ctx_.node = cfg_.node.name;
  plan_ctx_.work_dir = cfg_.work_dir;
  plan_ctx_.agent_is_root = geteuid() == 0;
  plan_ctx_.agent_uid = geteuid();
  plan_ctx_.allow_root_jobs = cfg_.allow_root_jobs;
  plan_ctx_.single_user = cfg_.single_user && !plan_ctx_.agent_is_root;
  plan_ctx_.gpu_count = cfg_.node.GpuCount();
  plan_ctx_.task_pids_max = cfg_.task_pids_max;
  // GPU index i is /dev/nvidia<i> (nvidia-smi's order); denied to the ranks not given it.
  for (int32_t i = 0; i < plan_ctx_.gpu_count; ++i) plan_ctx_.gpu_devices.push_back("/dev/nvidia" + std::to_string(i));
  if (plan_ctx_.gpu_count > 0 && cfg_.nvml_library != "none") {
    std::string why;
    bool absent = false;
    nvml_ = Nvml::Load(cfg_.nvml_library, &why, &absent);
    if (nvml_) spdlog::info("NVML: {} GPU(s); their utilization and memory go with each heartbeat", nvml_->Devices());
    else spdlog::warn("NVML: {}; the tasks' GPU use is not measured", why);
    if (!nvml_ && !absent) nvml_error_ = why;  // the driver's library is there but NVML fails: a health problem
  }
  TaskDriver::StartedFn started = [this](const TaskKey& k, pid_t pid) { OnTaskStarted(k, pid); };
  TaskDriver::ExitedFn exited = [this](const TaskKey& k, pid_t, const ExitReport& r) { OnTaskExited(k, r); };
  if (containers && cfg_.containers) {
    tools_ = DetectContainerTools();
    if (!plan_ctx_.agent_is_root) plan_ctx_.container_refusal = "agentd is not root";
    else if (!tools_.Usable()) plan_ctx_.container_refusal = "missing: " + tools_.missing;
    else plan_ctx_.containers = true;
  } else {
    plan_ctx_.container_refusal = containers ? "agentd --containers off" : "this driver runs no containers";
  }
  if (plan_ctx_.containers) {
    if (cfg_.image_cache.dir.empty()) cfg_.image_cache.dir = cfg_.work_dir + "/images";
    images_ = std::make_unique<ImageCache>(cfg_.image_cache, tools_);
    auto containers_driver =
        std::make_unique<ContainerDriver>(tools_, cfg_.work_dir + "/containers", make_driver, started, exited);
    if (plan_ctx_.gpu_count > 0) PassGpus(containers_driver.get());
    driver_ = std::move(containers_driver);
  } else {
    driver_ = make_driver(started, exited);
  }
  stack_tools_ = FindStackTools();
  StartSessionHost();
}

void Agent::StartSessionHost() {
  sessions_ = std::make_unique<SessionHost>(
      cfg_.node.name, [this](std::string* server) { return SessionChannel(server); },
      [this](const TaskKey& k) -> std::optional<SessionHost::Task> {
        // A session may arrive before the attempt's commit is applied here (the stream's reader
        // hands the commit on, this thread runs at once) or between the commit and its task's
        // start (mlrun opens its sessions as soon as the allocation runs): wait while the
        // attempt is prepared or its rank committed and not started, up to 10 s (this is the
        // session's own thread). An attempt unknown here is refused at once.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (;;) {
          bool started = false;
          for (const auto& r : driver_->Running()) started |= r.key == k;
          const bool coming = attempts_.PhaseOf(k.Attempt()) == AttemptTable::Phase::kPrepared || attempts_.LiveRequest(k);
          if (started || stopping_ || std::chrono::steady_clock::now() >= until || !coming) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        auto req = attempts_.LiveRequest(k);
        if (!req) return std::nullopt;
        SessionHost::Task t{std::move(*req), {}};
        if (cgroups_) t.cgroup_dirs = cgroups_->DirsOf(k);
        return t;
      },
      [this](const TaskKey& k, ExecRequest want, ExecPlan* plan) { return driver_->PrepareExec(k, std::move(want), plan); });
}

void Agent::PassGpus(ContainerDriver* driver) const {
  const std::vector<LdCacheEntry> ld_cache = ReadHostLdCache();
  std::vector<std::string> errors;
  CdiCatalog cdi = MakeCdiCatalog(LoadCdiSpecs(cfg_.cdi_spec_dirs, &errors), ld_cache);
  for (const auto& e : errors) spdlog::warn("containers: CDI spec refused: {}", e);
  if (!cdi.specs.empty()) {
    std::string files;
    for (const auto& s : cdi.specs) files += (files.empty() ? "" : ", ") + s.file;
    spdlog::info("containers: GPUs are passed into containers as the CDI specs of kind {} say ({})", kCdiGpuKind, files);
    for (const auto& h : UnsupportedHooks(cdi)) spdlog::warn("containers: CDI hook not run (agentd runs no hooks): {}", h);
    driver->UseCdi(std::move(cdi));
    return;
  }
  std::vector<DriverFile> files = DetectGpuDriverFiles(ld_cache);
  spdlog::info("containers: {} file(s) of the GPU driver are bound into containers that hold GPUs", files.size());
  driver->UseGpuDriverFiles(std::move(files));
}

Agent::~Agent() {
  Shutdown();
  if (lock_fd_ >= 0) close(lock_fd_);
}

void Agent::PrepareWorkDir() {
  std::error_code ec;
  fs::create_directories(fs::path(cfg_.work_dir) / "jobs", ec);
  if (ec) throw std::runtime_error("cannot create work directory " + cfg_.work_dir + "/jobs: " + ec.message());
  // Task users must reach their attempt directory (script, status files) but not list others'.
  fs::permissions(fs::path(cfg_.work_dir) / "jobs", fs::perms(0711), ec);
  struct stat st{};
  if (geteuid() == 0 && stat(cfg_.work_dir.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH))
    spdlog::warn("work directory {} is not searchable by other users: tasks of non-root users cannot run "
                 "batch scripts or write status files (chmod o+x)", cfg_.work_dir);
  std::string lock = cfg_.work_dir + "/agentd.lock";
  lock_fd_ = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw std::runtime_error("cannot open " + lock + ": " + std::strerror(errno));
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
    throw std::runtime_error("work directory " + cfg_.work_dir + " is in use by another agentd (" + lock + " is locked)");
  // No task survives its agent (PR_SET_PDEATHSIG), so attempt directories left here are stale,
  // but those of tasks a reload in place handed over.
  std::set<std::string> reloaded;  // "<job>.<attempt>" and a container job's "<job>.<attempt>.shm"
  if (reloaded_)
    for (const auto& a : reloaded_->attempts) reloaded.insert({a.key.ToString(), a.key.ToString() + ".shm"});
  for (const auto& entry : fs::directory_iterator(fs::path(cfg_.work_dir) / "jobs", ec)) {
    if (reloaded.count(entry.path().filename().string())) continue;
    if (entry.path().extension() == ".shm") {  // a container job's /dev/shm (a tmpfs)
      RemoveJobShm(entry.path().string());
      continue;
    }
    spdlog::info("removing stale attempt directory {}", entry.path().string());
    RemoveAttemptFiles(entry.path().string());
  }
}

void Agent::SetUpCgroups() {
  if (cfg_.cgroups == CgroupMode::kOff) {
    isolation_ = "off";
    spdlog::warn("cgroups: off (--cgroups off) - tasks run without memory/CPU/device limits");
    return;
  }
  CgroupLayout layout = DetectCgroups();
  const bool required = cfg_.cgroups == CgroupMode::kRequired;
  if (required && !(layout.Has("memory") && layout.Has("cpu") && layout.Has("pids")))
    throw std::runtime_error("--cgroups required, but the memory, cpu and pids controllers are not all available: " +
                             layout.Describe());
  if (layout.version == 0) {
    spdlog::warn("{}", layout.Describe());
    return;
  }
  auto cgroups = std::make_unique<Cgroups>(layout, Cgroups::BaseName(cfg_.node.name, cfg_.work_dir));
  std::set<TaskKey> keep;  // the cgroups of tasks a reload in place handed over
  if (reloaded_)
    for (const auto& t : reloaded_->tasks) keep.insert(t.key);
  if (std::string err = cgroups->Init(keep); !err.empty()) {
    if (required) throw std::runtime_error("--cgroups required: " + err);
    spdlog::warn("cgroups: cannot use {} ({}): tasks run without memory/CPU/device limits", layout.Summary(), err);
    return;
  }
  const CgroupLayout& used = cgroups->Layout();  // Init() may add v2 devices
  if (used.Missing().empty()) spdlog::info("{}", used.Describe());
  else spdlog::warn("{}", used.Describe());
  isolation_ = used.Summary();
  cgroups_ = std::move(cgroups);
  driver_->UseCgroups(cgroups_.get());
}

void Agent::Start() {
  if (started_) return;
  if (cfg_.servers.empty()) throw std::runtime_error("no schedd address given");
  reloaded_ = TakeReloadState();
  PrepareWorkDir();
  outbox_.Load();  // reports a previous agent left unacknowledged go out first
  epoch_file_ = std::make_unique<EpochFile>(cfg_.work_dir);
  epoch_ = epoch_file_->Load();
  if (epoch_ > 0) spdlog::info("controller epoch {} (from {}/{}): messages of older leaders are refused", epoch_.load(),
                               cfg_.work_dir, kEpochFileName);
  if (metrics_) metrics_->SetEpoch(epoch_);
  SetUpCgroups();
  if (images_) {
    if (std::string err = images_->Init(); !err.empty()) {
      spdlog::error("image cache: {}: container jobs are refused on this node", err);
      plan_ctx_.containers = false;
      plan_ctx_.container_refusal = "its image cache is unusable: " + err;
    } else {
      spdlog::info("containers: {} with {} and {}; image cache {}", tools_.runtime, tools_.skopeo, tools_.umoci,
                   cfg_.image_cache.dir);
    }
  } else if (cfg_.containers && plan_ctx_.agent_is_root) {
    spdlog::warn("containers: off ({})", plan_ctx_.container_refusal);
  }
  HealthConfig health = cfg_.health;
  health.expected_gpus = plan_ctx_.gpu_count;
  health.disk_dirs.push_back(cfg_.work_dir);
  if (images_) health.disk_dirs.push_back(cfg_.image_cache.dir);
  health_ = std::make_unique<HealthMonitor>(std::move(health), nvml_.get(), nvml_error_, metrics_);
  health_->Start();
  started_ = true;
  disconnected_since_ = std::chrono::steady_clock::now();
  if (reloaded_ && reloaded_->disconnected_since_ms)  // the cut-off bound runs on across the exec
    disconnected_since_ = std::chrono::steady_clock::time_point(std::chrono::milliseconds(*reloaded_->disconnected_since_ms));
  if (reloaded_) AdoptReloaded(*reloaded_);
  reloaded_.reset();
  driver_->Start();
  if (cfg_.read_task_progress) progress_.Start();
  session_ = std::thread([this] { SessionLoop(); });
  if (cfg_.cutoff_timeout.count() > 0) cutoff_ = std::thread([this] { CutoffLoop(); });
  if (!cfg_.eviction_url.empty()) {
    eviction_ = std::make_unique<EvictionPoller>(cfg_.eviction_url, cfg_.eviction_interval,
                                                 [this](const EvictionNoticeInfo& n) { OnEviction(n); });
    eviction_->Start();
  }
  std::string servers;
  for (const auto& a : cfg_.servers) servers += (servers.empty() ? "" : ", ") + a;
  spdlog::info("agentd {} for node {} ({} mCPU, {} bytes, {} GPUs) connecting to {}", cfg_.version, cfg_.node.name,
               cfg_.node.cpu_millis, cfg_.node.memory_bytes, cfg_.node.GpuCount(), servers);
}

void Agent::Shutdown() {
  if (!started_ || stopping_.exchange(true)) return;
  if (eviction_) eviction_->Stop();
  {
    std::lock_guard lk(mu_);
    cv_.notify_all();
  }
  if (cutoff_.joinable()) cutoff_.join();
  size_t n = driver_->Size();
  if (n) spdlog::info("shutting down: terminating {} task(s)", n);
  if (images_) images_->Cancel();  // image pulls in progress end now
  {
    std::unique_lock lk(pull_mu_);
    auto threads = std::move(pull_threads_);
    pull_cv_.notify_all();
    lk.unlock();
    for (auto& t : threads) t.first.join();
  }
  {
    std::unique_lock lk(pull_mu_);
    auto threads = std::move(stack_threads_);
    lk.unlock();
    for (auto& t : threads) t.first.join();  // each is bounded by the tools' time limits
  }
  sessions_->Stop();  // sessions hung up before their tasks end
  driver_->TerminateAll(cfg_.kill_grace);
  if (!driver_->WaitIdle(cfg_.kill_grace + std::chrono::seconds(5))) spdlog::error("tasks did not exit in time");
  for (const auto& dir : attempts_.Directories()) RemoveAttemptFiles(dir);
  // Let the writer send the exit reports, half-close, and wait for schedd to end the call.
  draining_ = true;
  outbox_.Wake();
  {
    std::unique_lock lk(mu_);
    cv_.notify_all();
    if (!cv_.wait_for(lk, std::chrono::seconds(3), [&] { return session_done_; })) {
      spdlog::warn("schedd did not close the stream in time; cancelling it");
      CancelCurrent();
    }
  }
  if (session_.joinable()) session_.join();
  progress_.Stop();
  health_->Stop();
  driver_->Stop();
  if (cgroups_) cgroups_->Clear(2000, /*remove_base=*/true);
  spdlog::info("agentd stopped");
}

std::vector<TaskKey> Agent::RunningKeys() const {
  std::vector<TaskKey> keys;
  for (const auto& r : driver_->Running()) keys.push_back(r.key);
  return keys;
}

v1::AgentMessage Agent::MakeRegister() const {
  v1::AgentMessage m;
  auto* r = m.mutable_register_();
  r->set_name(cfg_.node.name);
  r->set_pool(PoolOf(cfg_.node.pool));
  r->set_region(cfg_.node.region);
  r->set_zone(cfg_.node.zone);
  r->set_domain(cfg_.node.domain);
  auto* cap = r->mutable_capacity();
  cap->set_cpu_millis(cfg_.node.cpu_millis);
  cap->set_memory_bytes(cfg_.node.memory_bytes);
  for (const auto& g : cfg_.node.gpus) {
    auto* gc = cap->add_gpus();
    gc->set_type(g.type);
    gc->set_count(g.count);
  }
  r->set_address(cfg_.node.address);
  r->set_version(cfg_.version);
  r->set_isolation(isolation_);
  r->set_root_jobs(RunsRootJobs());
  r->set_container_runtime(ContainerRuntime());
  // The seconds after its last heartbeat by which a cut-off agent has stopped every task
  // (RegisterNode.cutoff_timeout_s): noticing the dead stream (keepalive: a ping after
  // keepalive_time, unanswered for keepalive_timeout; a silent partition is seen no sooner), then
  // the bound, then the kill grace. schedd waits longer than that before requeueing them. Leaving
  // out the keepalive let schedd requeue a job while its task still ran behind a partition (the
  // partition test of tests/e2e/hosts_e2e.sh found it).
  if (cfg_.cutoff_timeout.count() > 0)
    r->set_cutoff_timeout_s(static_cast<int32_t>(
        (cfg_.keepalive_time + cfg_.keepalive_timeout + cfg_.cutoff_timeout + cfg_.kill_grace).count() + 999) / 1000);
  FillRunning(driver_->Running(), nullptr, r->mutable_running());
  return m;
}

std::optional<TaskProgress> Agent::ReadProgress(const TaskKey& key) const {
  std::optional<TaskProgress> p = ReadTaskProgress(StatusFilePath(cfg_.work_dir, key));
  if (!nvml_) return p;
  const auto req = attempts_.LiveRequest(key);
  const std::vector<int32_t> gpus = req ? GpuIndicesOf(req->env) : std::vector<int32_t>{};
  if (gpus.empty()) return p;
  if (auto g = nvml_->ReadAll(gpus)) {  // may block on a broken GPU: this is the progress thread
    if (!p) p = progress_.Get(key);     // no status file: keep the last progress, update the GPUs
    p->gpu_util_percent = static_cast<int32_t>(g->util_percent);
    p->gpu_memory_bytes = static_cast<int64_t>(std::min<uint64_t>(g->memory_used, INT64_MAX));
    p->gpu_power_mw = g->power_mw ? static_cast<int64_t>(*g->power_mw) : -1;
  }
  return p;
}

v1::AgentMessage Agent::MakeHeartbeat() const {
  v1::AgentMessage m;
  m.mutable_heartbeat()->set_time(static_cast<int64_t>(std::time(nullptr)));
  m.mutable_heartbeat()->set_unsent_reports(static_cast<uint32_t>(outbox_.Unsent()));
  if (images_) {
    m.mutable_heartbeat()->set_image_cache_bytes(images_->UsedBytes());
    m.mutable_heartbeat()->set_image_cache_images(static_cast<uint32_t>(images_->Images()));
  }
  FillRunning(driver_->Running(), &progress_, m.mutable_heartbeat()->mutable_running());
  if (metrics_) {
    AgentMetrics::TaskUsage u;
    double util = 0;
    int with_gpus = 0;
    for (const auto& t : m.heartbeat().running()) {
      u.memory_bytes += static_cast<double>(std::max<int64_t>(0, t.rss_bytes()));
      u.cpu_seconds += static_cast<double>(std::max<int64_t>(0, t.cpu_usec())) / 1e6;
      u.gpu_power_watts += static_cast<double>(std::max<int64_t>(0, t.gpu_power_mw())) / 1000.0;
      if (t.has_gpu_util_percent()) util += t.gpu_util_percent(), ++with_gpus;
    }
    if (with_gpus > 0) u.gpu_util_percent = util / with_gpus;
    metrics_->SetTaskUsage(u);
  }
  if (health_) {
    v1::NodeHealth h;
    health_->Fill(&h);
    if (h.checked_at() != 0) *m.mutable_heartbeat()->mutable_health() = std::move(h);
  }
  return m;
}

void Agent::HandleMessage(const v1::SchedulerMessage& msg, Connection& conn) {
  if (!AcceptEpoch(msg.epoch(), conn)) return;  // a deposed leader's: no prepare, commit, abort, signal or ack
  switch (msg.msg_case()) {
    case v1::SchedulerMessage::kRegistered: HandleRegistered(msg.registered()); break;
    case v1::SchedulerMessage::kPrepare: HandlePrepare(msg.prepare()); break;
    case v1::SchedulerMessage::kCommit: HandleCommit(msg.commit()); break;
    case v1::SchedulerMessage::kAbort: HandleAbort(msg.abort()); break;
    case v1::SchedulerMessage::kSignal: HandleSignal(msg.signal()); break;
    case v1::SchedulerMessage::kAck: outbox_.Ack(msg.ack().seq()); break;
    case v1::SchedulerMessage::kOpenSession: sessions_->Open(msg.open_session()); break;
    case v1::SchedulerMessage::kCollectStacks: HandleCollectStacks(msg.collect_stacks()); break;
    case v1::SchedulerMessage::kNotice: HandleNotice(msg.notice()); break;
    default: spdlog::warn("ignoring an empty or unknown message from schedd"); break;
  }
}

void Agent::HandleRegistered(const v1::Registered& reg) {
  heartbeat_interval_s_ = std::max(1, reg.heartbeat_interval_s());
  std::set<TaskKey> keep;
  for (const auto& k : reg.keep()) keep.insert({k.job_id(), k.attempt(), k.rank()});
  for (const auto& r : driver_->Running()) {
    if (keep.count(r.key)) continue;
    spdlog::warn("task {} (pid {}) is not assigned to this node any more: terminating it (fencing)",
                 r.key.ToString(), r.pid);
    driver_->Terminate(r.key, cfg_.fence_grace);
  }
  for (const auto& key : attempts_.PreparedNotIn(keep)) DropPrepared(key, "not kept at registration");
  spdlog::info("registered with schedd: heartbeat every {} s, {} task(s) kept", heartbeat_interval_s_.load(),
               keep.size());
}

void Agent::HandlePrepare(const v1::Prepare& p) {
  AttemptKey key{p.job_id(), p.attempt()};
  {
    std::lock_guard lk(pull_mu_);
    if (pulling_.count(key)) return;  // a repeated prepare: the pull answers when it is done
  }
  const bool fresh = !attempts_.Known(key);
  v1::AgentMessage reply;
  auto* r = reply.mutable_prepare_result();
  r->set_job_id(key.job_id);
  r->set_attempt(key.attempt);
  std::string error;
  ToolUser user;  // the job's: a container image on the node's file system is read as this user
  if (fresh && health_) {
    // Checked again before each prepare: a GPU that failed since the last round takes no gang.
    // Not fatal: schedd places the job elsewhere (and drains this node at its next heartbeat).
    if (auto problems = health_->CheckQuick(); !problems.empty())
      error = "node " + cfg_.node.name + " failed its health checks: " + SummarizeProblems(problems);
  }
  if (error.empty() && !attempts_.Known(key)) {
    auto plan = PlanAttempt(p, plan_ctx_);
    if (!plan) error = plan.error;
    else plan.value->prepare = p.SerializeAsString();  // a reload in place plans it again from this
    if (plan && !plan.value->ranks.empty()) {
      const LaunchRequest& first = plan.value->ranks.front().request;  // every rank has the same
      user = {first.uid, first.gid, first.groups};
    }
    if (plan && plan.value->HasRank0()) {  // rank 0 runs here: the attempt's rendezvous port
      auto port = ReserveRendezvousPort(cfg_.node.address);
      if (port) {
        plan.value->rendezvous = std::move(port.value->socket);
        plan.value->rendezvous_port = port.value->port;
      } else {
        error = port.error;
      }
    }
    if (error.empty() && (error = attempts_.Reserve(*plan.value)).empty()) {
      error = WriteAttemptFiles(*plan.value);
      if (!error.empty()) {
        attempts_.DropPrepared(key);
        RemoveAttemptFiles(plan.value->dir);
      }
    }
  }
  if (error.empty() && fresh && p.spec().has_container()) {  // the image first: the pull answers the prepare
    std::lock_guard lk(pull_mu_);
    pulling_.insert(key);
    std::erase_if(pull_threads_, [](auto& t) {
      if (!t.second->load()) return false;
      t.first.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    pull_threads_.emplace_back(std::thread([this, key, c = p.spec().container(), user, done] {
                                 PullForAttempt(key, c.image(), c.auth_file(), user);
                                 *done = true;
                               }),
                               done);
    return;
  }
  r->set_ok(error.empty());
  r->set_error(error);
  if (error.empty()) r->set_master_port(attempts_.RendezvousPort(key));  // a repeated prepare: the same port
  if (error.empty()) spdlog::info("job {}: prepared {} task(s){}", key.ToString(), p.tasks_size(),
                                  r->master_port() ? ", rendezvous port " + std::to_string(r->master_port()) : "");
  else spdlog::warn("job {}: prepare failed: {}", key.ToString(), error);
  outbox_.Push(std::move(reply));
}

void Agent::PullForAttempt(const AttemptKey& key, const std::string& image, const std::string& auth_file,
                           const ToolUser& user) {
  {
    std::unique_lock lk(pull_mu_);
    pull_cv_.wait(lk, [&] { return pulls_running_ < std::max(1, cfg_.max_concurrent_pulls) || stopping_; });
    ++pulls_running_;
  }
  std::vector<std::string> events;
  auto progress = [&](const std::string& line) {
    spdlog::info("job {}: {}", key.ToString(), line);
    if (events.size() + 1 < static_cast<size_t>(kMaxPrepareEvents)) events.push_back(line.substr(0, kMaxPrepareEventBytes));
  };
  PullReport report;
  bool transient = false;
  auto pulled = stopping_ ? Parsed<std::shared_ptr<const CachedImage>>{} : images_->Acquire(image, progress, &report, &transient, &user, auth_file);
  if (stopping_ && pulled.error.empty() && !pulled) pulled.error = "agentd is shutting down";
  const bool live = attempts_.PhaseOf(key) == AttemptTable::Phase::kPrepared;
  {
    std::lock_guard lk(pull_mu_);
    --pulls_running_;
    pull_cv_.notify_all();
    pulling_.erase(key);
    if (pulled && live) pulled_[key] = *pulled.value;
  }
  if (metrics_ && pulled && !report.cached) metrics_->ObserveImagePull(report.seconds);
  v1::AgentMessage reply;
  auto* r = reply.mutable_prepare_result();
  r->set_job_id(key.job_id);
  r->set_attempt(key.attempt);
  if (!pulled) {
    spdlog::warn("job {}: prepare failed: {}", key.ToString(), pulled.error);
    DropPrepared(key, "image not available");
    r->set_ok(false);
    r->set_error(pulled.error.substr(0, kMaxPrepareEventBytes));
    r->set_fatal(!transient);
    events.push_back(("image: " + pulled.error).substr(0, kMaxPrepareEventBytes));
  } else {
    const std::string& digest = (*pulled.value)->digest;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", report.seconds);
    events.push_back(report.cached ? "image: " + digest + " already on node " + cfg_.node.name
                                   : "image: " + digest + " ready on node " + cfg_.node.name + " in " + secs + " s");
    r->set_ok(live);
    if (!live) r->set_error("the attempt was aborted during the image pull");
    r->set_image_digest(digest);
    if (live) r->set_master_port(attempts_.RendezvousPort(key));
    spdlog::info("job {}: prepared (image {}{})", key.ToString(), digest, report.cached ? ", cached" : "");
  }
  for (const auto& e : events) r->add_events(e);
  outbox_.Push(std::move(reply));
}

void Agent::HandleCommit(const v1::Commit& c) {
  AttemptKey key{c.job_id(), c.attempt()};
  auto result = attempts_.Commit(key);
  if (!result.known) {
    std::string why = "commit of job " + key.ToString() + " which was never prepared on node " + cfg_.node.name;
    spdlog::warn("{}", why);
    outbox_.Push(TaskExitedMessage({key.job_id, key.attempt, -1}, ExitReport{127, false, why}));
    return;
  }
  if (result.launch.empty()) {
    spdlog::debug("job {}: repeated commit ignored", key.ToString());
    return;
  }
  // MASTER_PORT is the commit's (rank 0's reservation, relayed by schedd); rank 0 inherits the
  // reserved socket only when that is the port it holds.
  const int32_t port = c.master_port() > 0 && c.master_port() <= 65535 ? c.master_port() : 0;
  if (port == 0)
    spdlog::warn("job {}: the commit carries no valid rendezvous port ({}): MASTER_PORT is not set", key.ToString(),
                 c.master_port());
  attempts_.SetMasterPort(key, port);  // interactive sessions' environment (LiveRequest)
  int rendezvous_fd = -1;
  if (result.rendezvous && result.rendezvous_port == port) rendezvous_fd = result.rendezvous->get();
  else if (result.rendezvous)
    spdlog::warn("job {}: schedd's MASTER_PORT {} is not the port {} reserved here; rank 0 gets no rendezvous socket",
                 key.ToString(), port, result.rendezvous_port);
  std::shared_ptr<const CachedImage> image;
  {
    std::lock_guard lk(pull_mu_);
    if (auto it = pulled_.find(key); it != pulled_.end()) image = it->second;
  }
  for (auto& r : result.launch) {
    TaskKey task{key.job_id, key.attempt, r.rank};
    if (r.request.container) r.request.container->image = image;
    const bool holder = r.rank == 0 && rendezvous_fd >= 0;
    AddCommitEnvironment(&r.request.env, port, holder ? rendezvous_fd : -1);
    if (holder) r.request.inherit_fd = result.rendezvous;
    if (!driver_->Spawn(task, std::move(r.request)))
      OnTaskExited(task, ExitReport{127, false, "agent is shutting down or the task already runs"});
  }
}

void Agent::DropPrepared(const AttemptKey& key, const std::string& why) {
  {
    std::lock_guard lk(pull_mu_);
    pulled_.erase(key);
  }
  if (auto dir = attempts_.DropPrepared(key)) {
    RemoveAttemptFiles(*dir);
    spdlog::info("job {}: reservation released ({})", key.ToString(), why);
  }
}

void Agent::Terminate(const AttemptKey& key, std::chrono::milliseconds grace, const std::string& why) {
  if (attempts_.PhaseOf(key) == AttemptTable::Phase::kPrepared) return DropPrepared(key, why);
  auto live = attempts_.LiveTasks(key);
  if (live.empty()) {
    spdlog::debug("job {}: nothing to terminate ({})", key.ToString(), why);
    return;
  }
  spdlog::info("job {}: terminating {} task(s), grace {} ms ({})", key.ToString(), live.size(), grace.count(), why);
  for (const auto& t : live) driver_->Terminate(t, grace);
}

void Agent::HandleAbort(const v1::Abort& a) {
  Terminate({a.job_id(), a.attempt()}, cfg_.kill_grace, "abort: " + a.reason());
}

void Agent::HandleSignal(const v1::Signal& s) {
  AttemptKey key{s.job_id(), s.attempt()};
  if (s.kill()) {
    auto grace = s.grace_s() > 0 ? std::chrono::milliseconds(s.grace_s() * 1000LL) : std::chrono::milliseconds(10000);
    if (!s.reason().empty() && !attempts_.LiveTasks(key).empty()) {
      // Before the SIGTERM, so a task that reads MLSCHED_STOP_REASON_FILE on the signal finds it
      // (removed with the attempt directory when its last rank exits).
      const std::string dir = (fs::path(cfg_.work_dir) / "jobs" / key.ToString()).string();
      if (std::string err = WriteStopReason(dir, s.reason()); !err.empty())
        spdlog::warn("job {}: stop reason not written: {}", key.ToString(), err);
    }
    return Terminate(key, grace, s.reason().empty() ? "kill requested" : "kill requested: " + s.reason());
  }
  if (s.signal() <= 0 || s.signal() >= NSIG) {
    spdlog::warn("job {}: ignoring signal request with bad signal number {}", key.ToString(), s.signal());
    return;
  }
  for (const auto& t : attempts_.LiveTasks(key)) {
    if (!driver_->Signal(t, s.signal())) spdlog::debug("task {}: not running, signal dropped", t.ToString());
  }
  spdlog::info("job {}: sent signal {} ({})", key.ToString(), s.signal(), strsignal(s.signal()));
}

void Agent::CutoffLoop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stopping_.load(); });
    if (stopping_ || connected_ || cutoff_done_) continue;
    const auto cut_off_for = std::chrono::steady_clock::now() - disconnected_since_;
    const size_t tasks = driver_->Size();
    if (cut_off_for < cfg_.cutoff_timeout || tasks == 0) continue;
    cutoff_done_ = true;
    lk.unlock();
    std::string servers;
    for (const auto& a : cfg_.servers) servers += (servers.empty() ? "" : ", ") + a;
    spdlog::warn("cut off: no controller ({}) has registered this node for {} s (--cutoff-timeout {} s); asking "
                 "{} task(s) to checkpoint and stop as in a preemption (SIGTERM, SIGKILL after {} ms); their exits "
                 "are reported once a controller is back",
                 servers, std::chrono::duration_cast<std::chrono::seconds>(cut_off_for).count(),
                 std::chrono::duration_cast<std::chrono::seconds>(cfg_.cutoff_timeout).count(), tasks,
                 cfg_.kill_grace.count());
    if (metrics_) metrics_->CountCutoff();
    driver_->TerminateAll(cfg_.kill_grace);
    lk.lock();
  }
}

void Agent::OnTaskStarted(const TaskKey& key, pid_t pid) {
  v1::AgentMessage m;
  auto* t = m.mutable_task_started();
  t->set_job_id(key.job_id);
  t->set_attempt(key.attempt);
  t->set_rank(key.rank);
  t->set_pid(pid);
  if (metrics_) metrics_->CountTaskStarted();
  outbox_.Push(std::move(m));
}

void Agent::OnTaskExited(const TaskKey& key, const ExitReport& report) {
  if (metrics_)
    metrics_->CountTaskExit(report.signaled ? "signaled" : report.exit_code == 0 ? "completed"
                            : report.exit_code == 75                       ? "preempted"
                                                                           : "failed");
  if (auto dir = attempts_.RankExited(key)) {
    RemoveAttemptFiles(*dir);
    std::lock_guard lk(pull_mu_);
    pulled_.erase(key.Attempt());
  }
  outbox_.Push(TaskExitedMessage(key, report));
}

void Agent::OnEviction(const EvictionNoticeInfo& notice) {
  if (metrics_) metrics_->CountEvictionNotice();
  v1::AgentMessage m;
  m.mutable_eviction()->set_deadline(notice.deadline);
  m.mutable_eviction()->set_source(notice.source);
  outbox_.Push(std::move(m));
}

}  // namespace mlsched::agent
