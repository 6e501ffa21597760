// agentd: the per-node agent. Flags and wiring only; the work happens in mlsched::agent::Agent.
#include <CLI/CLI.hpp>
#include <curl/curl.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <csignal>
#include <ctime>
#include <iostream>
#include <memory>

#include "agentd/agent.h"
#include "common/client.h"
#include "common/metrics_http.h"
#include "common/units.h"

#ifndef MLSCHED_VERSION
#define MLSCHED_VERSION "unknown"
#endif

using namespace mlsched;

namespace {

// Daemons may start with closed standard descriptors; keep 0-2 taken so no socket or task pipe
// lands on them.
void ReserveStandardDescriptors() {
  for (int fd = 0; fd < 3; ++fd)
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}

/// Largest time after its last heartbeat by which a cut-off agent has stopped its tasks, seconds
/// (keepalive time + keepalive timeout + --cutoff-timeout + --kill-grace, sent in
/// RegisterNode.cutoff_timeout_s): schedd refuses a registration above one day
/// (Limits::kMaxCutoffSeconds), so agentd refuses to start with it.
constexpr int kMaxCutoffTimeoutS = 24 * 3600;

int Fail(const std::string& msg) {
  std::cerr << "agentd: " << msg << "\n";
  return 2;
}

/// agentd's --health-* flags as given (agent::HealthConfig once checked).
struct HealthFlags {
  double interval_s = 60, program_timeout_s = 60, max_clock_skew_s = 30;
  std::string program, min_free = "512M", kmsg = "/dev/kmsg";
  std::vector<int32_t> fatal_xids{agent::DefaultFatalXids().begin(), agent::DefaultFatalXids().end()};
};

void AddHealthOptions(CLI::App& app, HealthFlags& f) {
  app.add_option("--health-interval", f.interval_s,
                 "Seconds between rounds of node health checks (GPUs and ECC through NVML, fatal Xids in the kernel "
                 "log, free disk, clock, --health-program); a failing check drains the node. 0 = no checks")
      ->capture_default_str();
  app.add_option("--health-program", f.program,
                 "An administrator's health check run every round as root (Slurm's HealthCheckProgram, LBNL NHC): "
                 "a non-zero exit fails the node with its first output line as the reason. Must be root's and "
                 "writable by no one else, as every directory above it");
  app.add_option("--health-program-timeout", f.program_timeout_s, "Seconds --health-program may run before it counts as failed")
      ->capture_default_str();
  app.add_option("--health-min-free", f.min_free,
                 "Least free space in the work and image-cache directories, e.g. 512M, 10G; 0 = no disk check")
      ->capture_default_str();
  app.add_option("--health-kmsg", f.kmsg, "The kernel log read for NVIDIA Xid errors; 'none' = no Xid check")
      ->capture_default_str();
  app.add_option("--health-fatal-xids", f.fatal_xids, "Xids that fail the node, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--health-max-clock-skew", f.max_clock_skew_s,
                 "Seconds this node's clock may differ from schedd's (checked at each registration); 0 = no check")
      ->capture_default_str();
}

std::string ApplyHealthFlags(const HealthFlags& f, agent::HealthConfig* out) {
  if (f.interval_s < 0 || f.interval_s > 86400) return "--health-interval must be from 0 (off) to 86400 seconds";
  if (f.program_timeout_s < 1 || f.program_timeout_s > 3600) return "--health-program-timeout must be from 1 to 3600 seconds";
  if (f.max_clock_skew_s < 0 || f.max_clock_skew_s > 86400) return "--health-max-clock-skew must be from 0 (off) to 86400 seconds";
  if (!f.program.empty() && f.program[0] != '/') return "--health-program must be an absolute path";
  if (f.kmsg != "none" && (f.kmsg.empty() || f.kmsg[0] != '/')) return "--health-kmsg must be an absolute path or 'none'";
  auto free_bytes = ParseMemory(f.min_free);
  if (!free_bytes || *free_bytes.value < 0) return "--health-min-free: " + (free_bytes ? "must be >= 0" : free_bytes.error);
  if (f.fatal_xids.size() > 256) return "--health-fatal-xids: at most 256 Xids";
  out->interval = std::chrono::seconds(static_cast<int64_t>(f.interval_s));
  if (f.interval_s > 0 && out->interval.count() == 0) out->interval = std::chrono::seconds(1);
  out->program = f.program;
  out->program_timeout = std::chrono::seconds(static_cast<int64_t>(f.program_timeout_s));
  out->min_free_bytes = static_cast<uint64_t>(*free_bytes.value);
  out->kmsg = f.kmsg;
  out->fatal_xids = std::set<int32_t>(f.fatal_xids.begin(), f.fatal_xids.end());
  out->max_clock_skew_s = static_cast<int64_t>(f.max_clock_skew_s);
  return "";
}

/// This binary's path as started (/proc/self/exe), "" when unreadable: a reload execs what is
/// there then, the upgraded binary after a package upgrade.
std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  const std::string deleted = " (deleted)";
  if (path.size() > deleted.size() && path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
    path.resize(path.size() - deleted.size());
  return path;
}

/// The reload's execve, on the main thread (the parent of every task): the same arguments, the
/// state file named by kReloadStateEnv; every descriptor of this image closed. Returns only on
/// failure.
void ExecReloaded(const std::string& self, char** argv, const std::string& state_file) {
  setenv(agent::kReloadStateEnv, state_file.c_str(), 1);
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  spdlog::info("reload: exec {}", self);
  spdlog::default_logger()->flush();
  execv(self.c_str(), argv);
  std::cerr << "agentd: reload: exec " << self << ": " << std::strerror(errno) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  mlsched::DisableMutexDeadlockDetection();  // common/client.h
  CLI::App app{"agentd: the mlsched node agent"};
  app.footer("Signals: SIGTERM or SIGINT stops agentd and ends the node's tasks; SIGHUP (systemctl reload) reloads it "
             "in place: the same process execs its binary again (the upgraded one after a package upgrade) and keeps "
             "the tasks (docs/operations.md, \"Upgrading\").");
  std::string server, name = agent::Hostname(), pool = "on-demand", cpus, mem, work_dir = "/var/spool/mlsched/agentd";
  std::string region, zone, domain, address, eviction_url, log_level = "info";
  std::vector<std::string> gpus;
  TlsFiles cfg_tls{"/etc/mlsched/tls/ca.pem", "/etc/mlsched/tls/node.pem", "/etc/mlsched/tls/node.key"};
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  double kill_grace_s = 10, eviction_interval_s = 5, cutoff_timeout_s = 0, keepalive_time_s = 5, keepalive_timeout_s = 10;
  std::string cgroups = "auto";
  int64_t task_pids_max = 16384;
  bool allow_root_jobs = false, single_user = false;
  std::string containers = "auto", image_cache, image_cache_size = "0", image_cert_dir;
  std::vector<std::string> cdi_spec_dirs = agent::AgentConfig{}.cdi_spec_dirs;
  app.add_option("--server", server,
                 "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas: the agent follows the leader; "
                 "default $MLSCHED_SERVER, else unix:" + std::string(kDefaultSocket) + ")");
  app.add_option("--tls-cert", cfg_tls.cert, "On TCP: this node's certificate (PEM), naming the node")
      ->capture_default_str();
  app.add_option("--tls-key", cfg_tls.key, "On TCP: this node's private key (PEM)")->capture_default_str();
  app.add_option("--tls-ca", cfg_tls.ca, "On TCP: the cluster CA (PEM) that schedd's certificate chains to")
      ->capture_default_str();
  app.add_option("--name", name, "Node name (default: the host name)");
  app.add_option("--pool", pool, "Capacity pool: on-demand, spot or reserved");
  app.add_option("--cpus", cpus, "CPUs offered: N, N.5 or Nm millicores (default: hardware threads)");
  app.add_option("--mem", mem, "Memory offered, e.g. 64G (bare number = MB; default: physical memory)");
  app.add_option("--gpus", gpus, "GPUs offered as TYPE:N, repeatable or comma-separated; 'none' (default: nvidia-smi)");
  app.add_option("--region", region, "Region of the node");
  app.add_option("--zone", zone, "Zone of the node");
  app.add_option("--domain", domain, "Topology domain (NVLink domain / rack)");
  app.add_option("--work-dir", work_dir, "Agent work directory (one agent per directory)");
  app.add_option("--address", address, "Address other ranks use to reach this node (MASTER_ADDR)");
  app.add_option("--eviction-url", eviction_url, "Cloud metadata URL polled for spot eviction notices");
  app.add_option("--eviction-interval", eviction_interval_s, "Seconds between eviction polls");
  app.add_option("--kill-grace", kill_grace_s, "Seconds between SIGTERM and SIGKILL on abort and shutdown");
  app.add_option("--cutoff-timeout", cutoff_timeout_s,
                 "Seconds without any controller after which running tasks are asked to checkpoint and stop as in "
                 "a preemption (SIGTERM, SIGKILL after --kill-grace); 0 = never")
      ->capture_default_str();
  app.add_option("--keepalive-time", keepalive_time_s, "Seconds between HTTP/2 pings on the stream to schedd")
      ->capture_default_str();
  app.add_option("--keepalive-timeout", keepalive_timeout_s,
                 "Seconds without a ping answer after which schedd counts as gone (stopped or unreachable) and the "
                 "agent reconnects, to the next replica in HA")
      ->capture_default_str();
  app.add_option("--metrics-port", metrics_port, "Serve Prometheus node metrics on this port (0 = any free port)");
  app.add_option("--metrics-host", metrics_host, "Address the metrics endpoint binds to");
  app.add_option("--cgroups", cgroups,
                 "Task isolation: auto (the cgroup controllers the kernel offers), required (refuse to start "
                 "without memory, cpu and pids) or off")
      ->capture_default_str();
  app.add_option("--task-pids-max", task_pids_max, "Processes and threads per task (cgroup pids.max); 0 = no limit")
      ->capture_default_str();
  app.add_option("--containers", containers,
                 "Jobs in OCI images: auto (when agentd is root and finds runc, skopeo and umoci) or off")
      ->capture_default_str();
  app.add_option("--image-cache", image_cache, "Directory of the node's image cache (default WORK_DIR/images)");
  app.add_option("--image-cache-size", image_cache_size,
                 "Unpacked bytes of images the cache keeps, e.g. 200G (least recently used evicted; 0 = no limit)")
      ->capture_default_str();
  app.add_option("--image-cert-dir", image_cert_dir,
                 "Directory of registry CA certificates (*.crt) for pulls (default: the system's and "
                 "/etc/containers/certs.d)");
  std::string nvml_library = agent::AgentConfig{}.nvml_library;
  app.add_option("--nvml-library", nvml_library,
                 "NVML, loaded on a node with GPUs for their utilization and memory per task (heartbeats); "
                 "'none' = not used")
      ->capture_default_str();
  app.add_option("--cdi-spec-dirs", cdi_spec_dirs,
                 "Directories of CDI specs (nvidia-ctk cdi generate) for containers holding GPUs, comma-separated, "
                 "the first preferred; 'none' = the driver's files found through ldconfig")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--allow-root-jobs", allow_root_jobs,
               "Run jobs of uid 0 (as root). Off by default (Slurm's DisableRootJobs): a job submitted as root is "
               "refused at prepare, and schedd places root's jobs only on nodes whose agent allows them");
  app.add_flag("--single-user", single_user,
               "For an agentd that is not root: a one-user cluster where every job runs as the agent's user. "
               "Without it such an agent refuses jobs of any other uid");
  HealthFlags health;
  AddHealthOptions(app, health);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  agent::AgentConfig cfg;
  ServerList servers;
  if (std::string err = ResolveServerList(server, &servers); !err.empty()) return Fail("--server: " + err);
  cfg.servers = servers.addresses;
  cfg.version = MLSCHED_VERSION;
  cfg.work_dir = work_dir;
  cfg.nvml_library = nvml_library;
  cfg.eviction_url = eviction_url;
  cfg.eviction_interval = std::chrono::milliseconds(static_cast<int64_t>(eviction_interval_s * 1000));
  cfg.kill_grace = std::chrono::milliseconds(static_cast<int64_t>(kill_grace_s * 1000));
  if (name.empty()) return Fail("--name must not be empty");
  cfg.tls = cfg_tls;
  if (!IsUnixAddress(cfg.servers.front())) {
    // schedd accepts this agent only as the node its certificate names: check before connecting.
    auto cert = CheckCertificate(cfg.tls, std::time(nullptr));
    if (!cert.ok()) return Fail("TLS: " + cert.error);
    bool names_node = cert.common_name == name;
    for (const auto& d : cert.dns_names) names_node |= d == name;
    if (!names_node) return Fail("TLS: " + cfg.tls.cert + " names " + cert.common_name + ", not node '" + name + "'");
  }
  if (!agent::IsValidPool(pool)) return Fail("--pool must be on-demand, spot or reserved (got '" + pool + "')");
  if (kill_grace_s < 0 || eviction_interval_s <= 0) return Fail("--kill-grace must be >= 0 and --eviction-interval > 0");
  if (cutoff_timeout_s < 0 || cutoff_timeout_s > kMaxCutoffTimeoutS)
    return Fail("--cutoff-timeout must be from 0 (never) to " + std::to_string(kMaxCutoffTimeoutS) + " seconds");
  cfg.cutoff_timeout = std::chrono::milliseconds(static_cast<int64_t>(cutoff_timeout_s * 1000));
  // gRPC refuses pings more often than schedd's minimum interval (1 s); an hour bounds both.
  if (keepalive_time_s < 1 || keepalive_time_s > 3600 || keepalive_timeout_s < 1 || keepalive_timeout_s > 3600)
    return Fail("--keepalive-time and --keepalive-timeout must be from 1 to 3600 seconds");
  cfg.keepalive_time = std::chrono::milliseconds(static_cast<int64_t>(keepalive_time_s * 1000));
  cfg.keepalive_timeout = std::chrono::milliseconds(static_cast<int64_t>(keepalive_timeout_s * 1000));
  if (cutoff_timeout_s > 0 && keepalive_time_s + keepalive_timeout_s + cutoff_timeout_s + kill_grace_s > kMaxCutoffTimeoutS)
    return Fail("--keepalive-time + --keepalive-timeout + --cutoff-timeout + --kill-grace must be at most " +
                std::to_string(kMaxCutoffTimeoutS) + " seconds (one day: the time by which a cut-off node's tasks are gone)");
  auto cgroup_mode = agent::ParseCgroupMode(cgroups);
  if (!cgroup_mode) return Fail("--cgroups must be auto, required or off (got '" + cgroups + "')");
  if (task_pids_max < 0) return Fail("--task-pids-max must be >= 0");
  cfg.cgroups = *cgroup_mode;
  if (containers != "auto" && containers != "off") return Fail("--containers must be auto or off (got '" + containers + "')");
  cfg.containers = containers == "auto";
  auto cache_bytes = ParseMemory(image_cache_size);
  if (!cache_bytes || *cache_bytes.value < 0) return Fail("--image-cache-size: " + (cache_bytes ? "must be >= 0" : cache_bytes.error));
  cfg.image_cache.max_bytes = *cache_bytes.value;
  if (!image_cache.empty() && image_cache[0] != '/') return Fail("--image-cache must be an absolute path");
  cfg.image_cache.dir = image_cache;
  cfg.image_cache.cert_dir = image_cert_dir;
  if (cdi_spec_dirs == std::vector<std::string>{"none"}) cdi_spec_dirs.clear();
  for (const auto& d : cdi_spec_dirs)
    if (d.empty() || d[0] != '/') return Fail("--cdi-spec-dirs: '" + d + "' is not an absolute path");
  cfg.cdi_spec_dirs = cdi_spec_dirs;
  if (single_user && geteuid() == 0)
    return Fail("--single-user is for an agentd that is not root (as root, every job would run as root)");
  cfg.allow_root_jobs = allow_root_jobs;
  cfg.single_user = single_user;
  if (allow_root_jobs) spdlog::warn("--allow-root-jobs: jobs submitted by root (uid 0) run on this node");
  if (geteuid() != 0 && single_user)
    spdlog::warn("--single-user: agentd is not root; every job runs as uid {}", geteuid());
  else if (geteuid() != 0)
    spdlog::warn("agentd is not root: it runs only jobs of its own uid {} (see --single-user)", geteuid());
  cfg.task_pids_max = task_pids_max;
  if (std::string err = ApplyHealthFlags(health, &cfg.health); !err.empty()) return Fail(err);
  cfg.node.name = name;
  cfg.node.pool = pool;
  cfg.node.region = region;
  cfg.node.zone = zone;
  cfg.node.domain = domain;
  cfg.node.cpu_millis = agent::DetectCpuMillis();
  if (!cpus.empty()) {
    auto c = ParseCpus(cpus);
    if (!c || *c.value <= 0) return Fail("--cpus: " + (c ? "must be > 0 (got '" + cpus + "')" : c.error));
    cfg.node.cpu_millis = *c.value;
  }
  cfg.node.memory_bytes = agent::DetectMemoryBytes();
  if (!mem.empty()) {
    auto m = ParseMemory(mem);
    if (!m || *m.value <= 0) return Fail("--mem: " + (m ? "must be > 0 (got '" + mem + "')" : m.error));
    cfg.node.memory_bytes = *m.value;
  }
  if (gpus.empty()) {
    cfg.node.gpus = agent::DetectGpus();
  } else {
    auto g = agent::ParseGpuFlag(gpus);
    if (!g) return Fail(g.error);
    cfg.node.gpus = *g.value;
  }
  const bool loopback = std::all_of(cfg.servers.begin(), cfg.servers.end(), agent::IsLoopbackServer);
  cfg.node.address = !address.empty() ? address : loopback ? "127.0.0.1" : agent::Hostname();

  // SIGTERM/SIGINT (stop) and SIGHUP (reload in place) are taken by sigwait below; every thread
  // started later inherits the mask.
  cfg.tasks_on_caller = true;  // the tasks are the main thread's children (reload_state.h)
  const std::string self = SelfPath();
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  ReserveStandardDescriptors();
  curl_global_init(CURL_GLOBAL_DEFAULT);

  agent::Agent agent(cfg);
  agent::AgentMetrics metrics(cfg.node);
  agent.SetMetrics(&metrics);
  std::unique_ptr<MetricsHttpServer> metrics_http;
  try {
    if (metrics_port >= 0) {
      metrics_http = std::make_unique<MetricsHttpServer>(
          metrics_host, metrics_port, [&] { return metrics.Render(agent.Connected(), agent.Running().size()); });
      spdlog::info("metrics on http://{}:{}/metrics", metrics_host, metrics_http->Port());
    }
    agent.Start();
  } catch (const std::exception& e) {
    return Fail(e.what());
  }
  // Signals on a thread of their own: the main thread runs the tasks' supervisor (RunTasks), so
  // that after a reload it is still their parent and can exec.
  // A refused reload (an interactive session open) is tried again every second until it can be
  // done, so a package upgrade's reload happens once the node's last session ends.
  std::thread signals([&] {
    bool deferred = false;
    for (;;) {
      int sig = 0;
      if (deferred) {
        const timespec second{1, 0};
        sig = sigtimedwait(&sigs, nullptr, &second);
        if (sig < 0) sig = SIGHUP;  // the second passed: try again
      } else {
        sigwait(&sigs, &sig);
      }
      if (sig == SIGHUP) {
        if (!deferred) spdlog::info("received SIGHUP: reloading in place (the tasks keep running)");
        if (self.empty()) {
          spdlog::error("reload refused: this binary's path is unknown (/proc/self/exe)");
          continue;
        }
        std::string why = agent.Reload();
        if (why.empty() || agent.ReloadPending()) return;
        if (!deferred)
          spdlog::warn("reload refused for now: {}; agentd runs on and reloads as soon as it can (tried every second)",
                       why);
        deferred = true;
        continue;
      }
      spdlog::info("received {}: stopping", strsignal(sig));
      agent.Shutdown();
      return;
    }
  });
  agent.RunTasks();
  signals.join();
  if (agent.ReloadPending()) {
    metrics_http.reset();
    ExecReloaded(self, argv, cfg.work_dir + "/" + agent::kReloadStateFileName);
    return 1;  // the tasks end with this process (PR_SET_PDEATHSIG)
  }
  curl_global_cleanup();
  return 0;
}
