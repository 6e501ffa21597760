// schedd: the central scheduler daemon. Wires the SQLite store, the controller, the gRPC services
// (Unix socket with SO_PEERCRED, optional TCP with TLS, MUNGE for users and node certificates for agents) and the scheduling loop.
#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <malloc.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "common/client.h"
#include "common/metrics_http.h"
#include "common/munge.h"
#include "common/tls.h"
#include "schedd/policy/policy_loader.h"
#include "schedd/report/report.h"
#include "schedd/server/auth.h"
#include "schedd/server/controller.h"
#include "schedd/server/etcd_archive.h"
#include "schedd/server/etcd_flags.h"
#include "schedd/server/etcd_store.h"
#include "schedd/server/leader.h"
#include "schedd/server/retention.h"
#include "common/units.h"
#include "schedd/server/agent_gateway.h"
#include "schedd/server/services.h"
#include "schedd/server/store.h"

using namespace mlsched::server;

namespace {

/// Checks schedd's own certificate (expired, foreign CA, key mismatch) and logs what it found;
/// false when it is not usable. Run at start and on SIGHUP (gRPC re-reads the files by itself).
bool CheckOwnCertificate(const mlsched::TlsFiles& tls) {
  auto info = mlsched::CheckCertificate(tls, WallNow());
  if (!info.ok()) {
    spdlog::error("TLS: {}", info.error);
    return false;
  }
  spdlog::info("TLS: certificate {} (CN={}) valid for {} more day(s); files re-read every {} s", tls.cert,
               info.common_name, (info.not_after - WallNow()) / 86400, mlsched::kCertRefreshSeconds);
  return true;
}

/// Loads the policy file (all or nothing; pricing tables included) and adds the --operator users.
/// nullopt after logging every error as FILE:LINE:COL (also appended to `errors` when given).
std::optional<mlsched::core::PolicySet> LoadPolicy(const std::string& path, const std::vector<std::string>& operators,
                                                   std::vector<std::string>* errors = nullptr) {
  auto fail = [&](const std::string& e) {
    spdlog::error("{}", e);
    if (errors) errors->push_back(e);
  };
  mlsched::core::PolicySet policy;
  if (!path.empty()) {
    auto r = mlsched::policy::LoadPolicyFile(path);
    std::string pricing_error;
    if (r.ok() && !mlsched::report::LoadPricing(path, &pricing_error)) {
      fail(pricing_error);
      return std::nullopt;
    }
    if (!r.ok()) {
      for (const auto& e : r.errors) fail(e.ToString());
      return std::nullopt;
    }
    policy = std::move(*r.policy);
  }
  policy.operators.insert(policy.operators.end(), operators.begin(), operators.end());
  return policy;
}

/// Re-reads the --policy file and installs it all or nothing: SIGHUP and AdminService.ReloadPolicy
/// (mladmin policy reload) both come here. `trigger` names the caller in the log.
PolicyReloadResult ReloadPolicyFile(Controller& ctl, const std::string& path, const std::vector<std::string>& operators,
                                    const std::string& trigger) {
  static std::mutex mu;  // one reload at a time, so the last file read is the one in force
  std::lock_guard lk(mu);
  PolicyReloadResult r;
  r.path = path;
  r.configured = !path.empty();
  if (!r.configured) {
    spdlog::info("{}: no --policy file to reload", trigger);
    return r;
  }
  if (auto p = LoadPolicy(path, operators, &r.errors)) {
    ctl.SetPolicy(std::move(*p));
    ctl.Trigger();
    r.reloaded = true;
    spdlog::info("{}: policy reloaded from {}", trigger, path);
  } else {
    spdlog::error("{}: {} has errors; keeping the current policy", trigger, path);
  }
  return r;
}

/// HA mode: campaigns for leadership. On election the store starts writing under the new epoch,
/// the controller loads the state from etcd, agents get the epoch, and the gate opens. When the
/// leadership is lost (lease gone, or a write refused by the fence) the replica stops serving and
/// exits with status 3: a supervisor restarts it as a follower, with nothing in memory to trust.
void StartHa(Leadership& leadership, EtcdStore& store, LeaderGate& gate, AgentGateway& gateway, Controller& ctl,
             AdminServiceImpl& admin, EtcdClient& etcd, const std::string& self, const LeaderConfig& cfg,
             std::atomic<bool>& leading) {
  auto step_down = [&gate, &store](const std::string& why) {
    gate.Close();
    spdlog::critical("HA: stepping down: {}; {} write(s) refused by the fence; exiting (status 3)", why,
                     store.FencedWrites());
    spdlog::default_logger()->flush();
    std::_Exit(3);
  };
  store.SetOnFenced([step_down] { step_down("etcd refused a write of this epoch (fenced)"); });
  admin.SetHaStatusProvider([&leadership, &etcd, &store, self] {
    return BuildHaStatus(leadership, etcd, self, store.FencedWrites());
  });
  spdlog::info("HA: replica {} campaigning on {} (prefix {}, lease TTL {} s)", self, etcd.Endpoints().front(),
               cfg.prefix, cfg.lease_ttl_s);
  leadership.Start(
      [&, step_down](int64_t epoch) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
          store.BecomeLeader(epoch, leadership.Current().lease, leadership.KeyValue());
          gateway.SetEpoch(epoch);
          ctl.Recover(WallNow());
        } catch (const std::exception& e) {
          step_down(std::string("cannot load the state: ") + e.what());
        }
        leading = true;
        gate.Open();
        ctl.Trigger();
        spdlog::info("HA: leader at epoch {}: state loaded in {} ms, {} job(s) in memory; serving", epoch,
                     std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count(),
                     ctl.JobsInMemory());
      },
      [step_down](const std::string& why) {
        // Fault injection for the fencing test (tests/e2e/ha_e2e.sh): with
        // MLSCHED_FAILPOINT=ha-ignore-lease-loss a deposed leader does not notice that its lease
        // is gone (as if paused between the check and a write), so only etcd's fence stops it.
        if (const char* fp = std::getenv("MLSCHED_FAILPOINT"); fp && std::string(fp) == "ha-ignore-lease-loss") {
          spdlog::warn("failpoint ha-ignore-lease-loss: ignoring: {}", why);
          return;
        }
        step_down(why);
      });
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena: gRPC's many threads otherwise spread short-lived request buffers over
  // per-thread arenas, and the fragmentation roughly doubled schedd's memory per pending job
  // (bench_schedd: 3.9 KB -> 2.0 KB per job at 10,000 jobs) with no measurable throughput cost.
  mallopt(M_ARENA_MAX, 1);
  mlsched::DisableMutexDeadlockDetection();  // common/client.h
  CLI::App app{"schedd: the mlsched scheduler daemon"};
  std::string listen = std::string("unix:") + mlsched::kDefaultSocket, listen_tcp, token_file, munge_socket;
  mlsched::TlsFiles tls;
  std::string state_dir = "/var/lib/mlsched", log_level = "info", policy_file;
  ControllerConfig cfg;
  int cycle_ms = 1000;
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  std::vector<std::string> operators;
  std::string ha, advertise;
  EtcdFlags etcd_flags;
  LeaderConfig ha_cfg;
  size_t ha_max_txn_ops = kEtcdMaxTxnOps;
  ArchiveConfig archive;
  int64_t archive_interval_s = archive.archive_interval.count(), archive_copy_s = archive.copy_interval.count();
  app.add_option("--ha", ha, "HA mode: keep the state in etcd (etcd://HOST:PORT,...) and run as one of several replicas, "
                 "one of which leads (docs/operations.md, High availability)");
  AddEtcdFlags(app, &etcd_flags);
  app.add_option("--ha-prefix", ha_cfg.prefix, "etcd key prefix of this cluster's state");
  app.add_option("--ha-lease-ttl", ha_cfg.lease_ttl_s, "Seconds a silent leader keeps its lease")->check(CLI::Range(2, 60));
  app.add_option("--ha-max-txn-ops", ha_max_txn_ops, "etcd's --max-txn-ops (operations per transaction)")
      ->check(CLI::Range(16, 100000));
  app.add_option("--ha-archive-after", archive.after_s, "HA: seconds after a job ended (an event happened) that it "
                 "moves out of etcd into each replica's SQLite history in --state-dir (at least --min-job-age)")
      ->check(CLI::Range(int64_t{60}, int64_t{10} * 365 * 86400));
  app.add_option("--ha-archive-retention", archive.retention_s, "HA: seconds archived history stays in etcd for "
                 "replicas to copy (a replica down longer misses it)")->check(CLI::Range(int64_t{60}, int64_t{365} * 86400));
  app.add_option("--ha-archive-interval", archive_interval_s, "HA: seconds between the leader's archive passes")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_option("--ha-archive-copy-interval", archive_copy_s, "HA: seconds between each replica's copies of the archive")
      ->check(CLI::Range(int64_t{1}, int64_t{3600}));
  app.add_option("--advertise", advertise, "HA: the HOST:PORT clients and agents use to reach this replica "
                 "(default: the --listen-tcp address)");
  app.add_option("--listen", listen, "Unix socket to serve on (unix:PATH)");
  app.add_option("--listen-tcp", listen_tcp, "Also serve on TCP HOST:PORT, TLS only (needs --tls-cert/--tls-key/--tls-ca)");
  app.add_option("--tls-cert", tls.cert, "schedd's certificate (PEM) from the cluster CA");
  app.add_option("--tls-key", tls.key, "schedd's private key (PEM)");
  app.add_option("--tls-ca", tls.ca, "The cluster CA (PEM): agents' node certificates must chain to it");
  std::string tls_crl;
  app.add_option("--tls-crl", tls_crl, "CRL (PEM) signed by the cluster CA: agents presenting a node certificate it "
                 "revokes are refused (scripts/mlsched-certs.sh revoke NODE); re-read when it changes");
  app.add_option("--munge-socket", munge_socket, "munged socket for TCP callers' credentials (default $MLSCHED_MUNGE_SOCKET, else " +
                 std::string(mlsched::kDefaultMungeSocket) + ")");
  app.add_option("--token-file", token_file, "Removed: TCP callers prove who they are with MUNGE")->group("");
  app.add_option("--state-dir", state_dir, "Directory of the SQLite state (state.db)");
  app.add_option("--policy", policy_file, "Policy TOML file (policies/README.md); reloaded on SIGHUP");
  app.add_option("--operator", operators, "User allowed to act on any job (repeatable)");
  app.add_option("--heartbeat-interval", cfg.heartbeat_interval_s, "Seconds between agent heartbeats");
  app.add_option("--heartbeat-timeout", cfg.heartbeat_timeout_s, "Seconds of silence before a node is DOWN");
  app.add_option("--launch-timeout", cfg.launch_timeout_s, "Seconds for a gang to be prepared and started");
  app.add_option("--image-pull-timeout", cfg.image_pull_timeout_s,
                 "Seconds added to the prepare of a job in a container image, for its nodes to pull it");
  app.add_option("--kill-grace", cfg.kill_grace_s, "Seconds between SIGTERM and SIGKILL");
  app.add_option("--min-job-age", cfg.min_job_age_s, "Seconds finished jobs stay listed by default");
  std::string retention_text;
  app.add_option("--accounting-retention", retention_text,
                 "Delete finished jobs, their attempts, events and steps this long after they ended (slurmdbd's "
                 "PurgeJobAfter): e.g. 365d; at least 1d; default: keep forever. HA mode: this replica's history");
  app.add_option("--max-array-size", cfg.max_array_size, "Most elements of one job array (--array)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--requeue-backoff", cfg.requeue_backoff_s, "Seconds before a failed launch is retried");
  SessionRelay::Limits session_limits;
  int64_t client_grace_s = AllocationWatch::Limits{}.grace.count();
  app.add_option("--interactive-client-grace", client_grace_s,
                 "Seconds an interactive allocation (mlrun, mlalloc) lives on after its client went away")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  app.add_option("--session-bytes-per-second", session_limits.bytes_per_second,
                 "Bytes per second all interactive sessions together may relay through schedd (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cycle-interval-ms", cycle_ms, "Longest pause between scheduling cycles (ms)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--metrics-port", metrics_port, "Serve Prometheus metrics on this port (0 = any free port)");
  app.add_option("--metrics-host", metrics_host, "Address the metrics endpoint binds to");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (listen.rfind("unix:", 0) != 0) {
    std::cerr << "schedd: --listen must be unix:PATH (got '" << listen << "')\n";
    return 2;
  }
  int64_t retention_s = 0;
  if (!retention_text.empty()) {
    auto r = mlsched::ParseDuration(retention_text);
    if (!r || *r.value < 86400) {
      std::cerr << "schedd: --accounting-retention '" << retention_text << "': " << (r ? "at least 1d" : r.error) << "\n";
      return 2;
    }
    retention_s = *r.value;
  }
  if (!token_file.empty()) {
    std::cerr << "schedd: --token-file was removed: TCP users prove who they are with MUNGE and agents with node "
                 "certificates (docs/operations.md, Security model)\n";
    return 2;
  }
  if (!ha.empty() && listen_tcp.empty()) {
    std::cerr << "schedd: --ha needs --listen-tcp: clients and agents on other hosts reach the leader over TCP\n";
    return 2;
  }
  if (!ha.empty() && advertise.empty()) {
    advertise = listen_tcp;
    if (advertise.rfind("0.0.0.0:", 0) == 0) {
      char host[256] = {};
      ::gethostname(host, sizeof(host) - 1);
      advertise = std::string(host) + advertise.substr(7);
    }
    if (advertise.size() >= 2 && advertise.compare(advertise.size() - 2, 2, ":0") == 0) {
      std::cerr << "schedd: --ha needs a fixed --listen-tcp port (or --advertise HOST:PORT): clients list the replicas\n";
      return 2;
    }
  }
  ha_cfg.address = advertise;
  if (std::string err = ha.empty() ? "" : CheckEtcdFlags(etcd_flags); !err.empty()) {
    std::cerr << "schedd: --ha: " << err << "\n";
    return 2;
  }
  if (!listen_tcp.empty() && (tls.cert.empty() || tls.key.empty() || tls.ca.empty())) {
    std::cerr << "schedd: --listen-tcp needs --tls-cert, --tls-key and --tls-ca (scripts/mlsched-certs.sh makes them)\n";
    return 2;
  }

  // Signals are taken by sigwait in main; every other thread inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  try {
    if (!listen_tcp.empty() && !CheckOwnCertificate(tls)) return 2;
    std::unique_ptr<EtcdClient> etcd;
    std::unique_ptr<Store> store_owner;
    EtcdStore* estore = nullptr;
    if (ha.empty()) {
      store_owner = std::make_unique<SqliteStore>(state_dir);
    } else {
      etcd = std::make_unique<EtcdClient>(ParseEtcdEndpoints(ha), std::chrono::milliseconds(3000), etcd_flags.security);
      if (!etcd_flags.security.tls_enabled())
        spdlog::critical("HA: --ha-insecure: etcd is reached in PLAINTEXT; anyone who can reach {} reads every job's "
                         "environment and can make jobs run as any user. Use this for a throwaway test cluster only.",
                         ha);
      else
        spdlog::info("HA: etcd over {}", etcd->SecurityDescription());
      auto e = std::make_unique<EtcdStore>(*etcd, ha_cfg.prefix, ha_max_txn_ops);
      estore = e.get();
      store_owner = std::move(e);
    }
    Store& store = *store_owner;
    auto loaded = LoadPolicy(policy_file, operators);
    if (!loaded) {
      spdlog::critical("policy {} is invalid; not starting", policy_file);
      return 2;
    }
    mlsched::core::PolicySet policy = std::move(*loaded);
    if (!policy_file.empty()) spdlog::info("policy loaded from {}", policy_file);
    PeerCredListener listener(listen.substr(5));
    Controller* ctl_ptr = nullptr;
    Authenticator auth(&listener, AuthConfig{mlsched::ResolveMungeSocket(munge_socket)}, [&](const std::string& u) { return ctl_ptr && ctl_ptr->IsOperator(u); });
    std::unique_ptr<Leadership> leadership;
    std::unique_ptr<LeaderGate> gate;
    if (estore) {
      leadership = std::make_unique<Leadership>(*etcd, ha_cfg);
      gate = std::make_unique<LeaderGate>(advertise, [&] {
        auto v = leadership->Current();
        return std::make_pair(v.leader, v.epoch);
      });
    }
    UsageBook usage;  // before the gateway that writes to it
    AgentGateway gateway(auth, gate.get());
    gateway.SetUsageBook(&usage);
    Controller ctl(store, gateway, policy, cfg);
    ctl_ptr = &ctl;
    gateway.SetController(&ctl);
    SchedMetrics metrics;
    ctl.SetMetrics(&metrics);
    auth.SetMetrics(&metrics);
    if (!tls_crl.empty()) auth.SetRevocationList(std::make_shared<RevocationList>(tls_crl, tls.ca));
    ProvisionRunner provision_runner([&](const ProgramCall& call, const ProgramResult& r) {
      ctl.OnProgramDone(call, r);  // a finished suspend leaves the stored releasing list
      if (!r.error.empty() || r.timed_out || r.exit_code != 0)  // logged by the runner
        metrics.CountProvision(call.env.count("MLSCHED_PROVISION_POOL") ? call.env.at("MLSCHED_PROVISION_POOL") : "",
                               call.kind + "_program_failed", 1);
    });
    ctl.SetProvisionRunner(&provision_runner);
    if (!estore) ctl.Recover(WallNow());
    std::atomic<bool> leading{!estore};  // HA: the loop runs only on the leader, after its state is loaded
    std::unique_ptr<mlsched::MetricsHttpServer> metrics_http;
    // Set once the session components exist, cleared before they go (the scrape runs on its own thread).
    std::atomic<SessionRelay*> sessions_seen{nullptr};
    std::atomic<AllocationWatch*> watch_seen{nullptr};
    if (metrics_port >= 0) {
      metrics_http = std::make_unique<mlsched::MetricsHttpServer>(metrics_host, metrics_port, [&] {
        SchedMetrics::Gauges g = ctl.CollectGauges();
        if (SessionRelay* s = sessions_seen.load()) g.sessions_open = static_cast<double>(s->Open());
        if (AllocationWatch* w = watch_seen.load()) g.allocations_watched = static_cast<double>(w->Watched());
        g.leader = leading.load() ? 1 : 0;
        return metrics.Render(g);
      });
      spdlog::info("metrics on http://{}:{}/metrics", metrics_host, metrics_http->Port());
    }
    JobServiceImpl jobs(ctl, auth, gate.get());
    AdminServiceImpl admin(ctl, auth, gate.get());
    admin.SetPolicyReloader([&] { return ReloadPolicyFile(ctl, policy_file, operators, "ReloadPolicy"); });

    grpc::ServerBuilder builder;
    int tcp_port = 0;  // the port bound, when --listen-tcp asks for port 0
    if (!listen_tcp.empty()) {
      auto creds = mlsched::MakeServerCredentials(tls);
      // TCP callers are checked from their initial metadata, before a request body is read.
      auto verified = std::make_shared<VerifiedCredentials>();
      auth.SetVerifiedCredentials(verified);
      creds->SetAuthMetadataProcessor(
          std::make_shared<MungeAuthProcessor>(mlsched::ResolveMungeSocket(munge_socket), verified, &metrics));
      builder.AddListeningPort(listen_tcp, creds, &tcp_port);
    }
    StepBook steps(store, ctl);
    SessionRelay sessions(ctl, gateway, session_limits);
    sessions.SetStepBook(&steps);
    jobs.SetSessionRelay(&sessions);
    jobs.SetStepBook(&steps);
    AllocationWatch::Limits watch_limits;
    watch_limits.grace = std::chrono::seconds(client_grace_s);
    AllocationWatch allocation_watch(ctl, watch_limits);
    allocation_watch.SetActivitySources(&sessions, &usage);
    jobs.SetAllocationWatch(&allocation_watch);
    sessions.SetMetrics(&metrics);
    sessions_seen = &sessions;
    watch_seen = &allocation_watch;
    AgentSessionServiceImpl session_relays(sessions, auth, gate.get());
    builder.RegisterService(&jobs);
    builder.RegisterService(&session_relays);
    builder.RegisterService(&admin);
    builder.RegisterService(&gateway);
    // Checked by gRPC before any handler runs (before authentication): 16 MiB holds the largest spec
    // the policy's [limits] allow (script + environment + argv, checked by the loader).
    constexpr int kMaxRequestBytes = 16 << 20;
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    // At most this many calls in flight on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS;
    // gRPC's default is unlimited): with the receive limit it bounds what one connection can make
    // schedd buffer.
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 128);
    // Agents ping every 2 s, with or without calls in flight (gRPC keepalive), to notice a stopped
    // or unreachable schedd within seconds; schedd must accept that instead of closing the
    // connection with "too_many_pings".
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    // The sync server keeps at most MAX_POLLERS idle threads (gRPC's default: 2); a handler thread
    // beyond them exits after its call, so with more than two submitters waiting for their group
    // commit each call created and destroyed a thread. Keeping up to 32 idle ends that churn.
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
    builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 32);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) throw std::runtime_error("cannot start the gRPC server (is " + listen_tcp + " in use?)");
    listener.Start(server.get());
    spdlog::info("schedd listening on {}{}, state in {}", listen,
                 listen_tcp.empty() ? "" : " and tls:" + listen_tcp.substr(0, listen_tcp.rfind(':')) + ":" + std::to_string(tcp_port),
                 state_dir);

    std::atomic<bool> stop{false};
    if (estore) StartHa(*leadership, *estore, *gate, gateway, ctl, admin, *etcd, advertise, ha_cfg, leading);
    // HA: history leaves etcd for this replica's SQLite in --state-dir (etcd_archive.h); jobs still
    // listed (--min-job-age) are never moved.
    std::unique_ptr<SqliteStore> history;
    std::unique_ptr<HistoryArchiver> archiver;
    if (estore) {
      archive.after_s = std::max<int64_t>(archive.after_s, cfg.min_job_age_s + 60);
      archive.archive_interval = std::chrono::seconds(archive_interval_s);
      archive.copy_interval = std::chrono::seconds(archive_copy_s);
      history = std::make_unique<SqliteStore>(state_dir);
      archiver = std::make_unique<HistoryArchiver>(*etcd, *estore, *history, archive, [&leading] { return leading.load(); });
      spdlog::info("HA: history older than {} s moves to {}/state.db (archive kept in etcd {} s)", archive.after_s,
                   state_dir, archive.retention_s);
    }
    // Accounting retention: the store itself, or in HA mode this replica's history.
    std::unique_ptr<RetentionPurger> retention;
    if (retention_s > 0) {
      SqliteStore* target = estore ? history.get() : dynamic_cast<SqliteStore*>(&store);
      if (target) {
        retention = std::make_unique<RetentionPurger>(*target, retention_s, std::chrono::hours(1), [] { return WallNow(); });
        spdlog::info("accounting retention: finished jobs are deleted {} s after they ended", retention_s);
      }
    }
    std::thread loop([&] {
      while (!stop) {
        ctl.WaitForWork(cycle_ms);
        if (!leading) continue;
        if (stop) break;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          int64_t now = WallNow();
          ctl.Tick(now);
          ctl.RunCycle(now);
        } catch (const std::exception& e) {
          spdlog::error("scheduling loop: {}", e.what());
          ctl.CountInternalError();  // e.g. the store failed; the next cycle tries again
        }
        // Every submission triggers a cycle; under a burst with a long queue they would run back
        // to back and hold the controller's lock most of the time. Pausing as long as the cycle
        // took caps the loop at half of a core (Slurm's sched_min_interval has the same aim);
        // short cycles (a small queue) are not slowed noticeably.
        const auto took = std::chrono::steady_clock::now() - t0;
        if (!stop) std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(took, std::chrono::milliseconds(cycle_ms)));
      }
    });
    for (;;) {
      int sig = 0;
      sigwait(&sigs, &sig);
      if (sig == SIGHUP) {
        ReloadPolicyFile(ctl, policy_file, operators, "SIGHUP");
        if (!listen_tcp.empty()) CheckOwnCertificate(tls);
        continue;
      }
      spdlog::info("signal {}: shutting down", sig);
      break;
    }
    const auto stopping = std::chrono::steady_clock::now();
    auto since = [](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    if (gate) gate->Close();  // HA: clients and agents move on to the next leader from here
    stop = true;
    ctl.Trigger();
    loop.join();
    archiver.reset();
    retention.reset();
    if (estore) {
      estore->Drain();  // every accepted write is committed (or refused) before the lease goes
      leadership->Resign();
    }
    listener.Stop();
    const double loop_s = since(stopping);
    const auto closing = std::chrono::steady_clock::now();
    const size_t streams = gateway.CloseStreams(grpc::Status(grpc::StatusCode::UNAVAILABLE, "schedd is shutting down"));
    const double close_s = since(closing);
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));  // the clients' calls in flight
    const double server_s = since(closing) - close_s;
    gateway.Stop();  // its workers may still be handing messages to the controller
    spdlog::info("stopping: the scheduling loop and the store in {:.2f} s, {} agent stream(s) closed in {:.2f} s, the "
                 "server in {:.2f} s, the gateway in {:.2f} s",
                 loop_s, streams, close_s, server_s, since(closing) - close_s - server_s);
    sessions_seen = nullptr;
    watch_seen = nullptr;
    metrics_http.reset();  // no scrape reaches the session components as they go
    return 0;
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
