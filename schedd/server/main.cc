// schedd: the central scheduler daemon. Wires the SQLite store, the controller, the gRPC services
// (Unix socket with SO_PEERCRED, optional TCP with TLS, MUNGE for users and node certificates for agents) and the scheduling loop.
#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <malloc.h>

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

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena: gRPC's many threads otherwise spread short-lived request buffers over
  // per-thread arenas, and the fragmentation roughly doubled schedd's memory per pending job
  // (bench_schedd: 3.9 KB -> 2.0 KB per job at 10,000 jobs) with no measurable throughput cost.
  mallopt(M_ARENA_MAX, 1);
  CLI::App app{"schedd: the mlsched scheduler daemon"};
  std::string listen = std::string("unix:") + mlsched::kDefaultSocket, listen_tcp, token_file, munge_socket;
  mlsched::TlsFiles tls;
  std::string state_dir = "/var/lib/mlsched", log_level = "info", policy_file;
  ControllerConfig cfg;
  int cycle_ms = 1000;
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  std::vector<std::string> operators;
  app.add_option("--listen", listen, "Unix socket to serve on (unix:PATH)");
  app.add_option("--listen-tcp", listen_tcp, "Also serve on TCP HOST:PORT, TLS only (needs --tls-cert/--tls-key/--tls-ca)");
  app.add_option("--tls-cert", tls.cert, "schedd's certificate (PEM) from the cluster CA");
  app.add_option("--tls-key", tls.key, "schedd's private key (PEM)");
  app.add_option("--tls-ca", tls.ca, "The cluster CA (PEM): agents' node certificates must chain to it");
  app.add_option("--munge-socket", munge_socket, "munged socket for TCP callers' credentials (default $MLSCHED_MUNGE_SOCKET, else " +
                 std::string(mlsched::kDefaultMungeSocket) + ")");
  app.add_option("--token-file", token_file, "Removed: TCP callers prove who they are with MUNGE")->group("");
  app.add_option("--state-dir", state_dir, "Directory of the SQLite state (state.db)");
  app.add_option("--policy", policy_file, "Policy TOML file (policies/README.md); reloaded on SIGHUP");
  app.add_option("--operator", operators, "User allowed to act on any job (repeatable)");
  app.add_option("--heartbeat-interval", cfg.heartbeat_interval_s, "Seconds between agent heartbeats");
  app.add_option("--heartbeat-timeout", cfg.heartbeat_timeout_s, "Seconds of silence before a node is DOWN");
  app.add_option("--launch-timeout", cfg.launch_timeout_s, "Seconds for a gang to be prepared and started");
  app.add_option("--kill-grace", cfg.kill_grace_s, "Seconds between SIGTERM and SIGKILL");
  app.add_option("--min-job-age", cfg.min_job_age_s, "Seconds finished jobs stay listed by default");
  app.add_option("--max-array-size", cfg.max_array_size, "Most elements of one job array (--array)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--requeue-backoff", cfg.requeue_backoff_s, "Seconds before a failed launch is retried");
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
  if (!token_file.empty()) {
    std::cerr << "schedd: --token-file was removed: TCP users prove who they are with MUNGE and agents with node "
                 "certificates (docs/operations.md, Security model)\n";
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
    Store store(state_dir);
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
    AgentGateway gateway(auth);
    Controller ctl(store, gateway, policy, cfg);
    ctl_ptr = &ctl;
    gateway.SetController(&ctl);
    SchedMetrics metrics;
    ctl.SetMetrics(&metrics);
    auth.SetMetrics(&metrics);
    ctl.Recover(WallNow());
    std::unique_ptr<mlsched::MetricsHttpServer> metrics_http;
    if (metrics_port >= 0) {
      metrics_http = std::make_unique<mlsched::MetricsHttpServer>(
          metrics_host, metrics_port, [&] { return metrics.Render(ctl.CollectGauges()); });
      spdlog::info("metrics on http://{}:{}/metrics", metrics_host, metrics_http->Port());
    }
    JobServiceImpl jobs(ctl, auth);
    AdminServiceImpl admin(ctl, auth);
    admin.SetPolicyReloader([&] { return ReloadPolicyFile(ctl, policy_file, operators, "ReloadPolicy"); });

    grpc::ServerBuilder builder;
    int tcp_port = 0;  // the port bound, when --listen-tcp asks for port 0
    if (!listen_tcp.empty()) builder.AddListeningPort(listen_tcp, mlsched::MakeServerCredentials(tls), &tcp_port);
    builder.RegisterService(&jobs);
    builder.RegisterService(&admin);
    builder.RegisterService(&gateway);
    // Checked by gRPC before any handler runs (before authentication): 16 MiB holds the largest spec
    // the policy's [limits] allow (script + environment + argv, checked by the loader).
    constexpr int kMaxRequestBytes = 16 << 20;
    builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) throw std::runtime_error("cannot start the gRPC server (is " + listen_tcp + " in use?)");
    listener.Start(server.get());
    spdlog::info("schedd listening on {}{}, state in {}", listen,
                 listen_tcp.empty() ? "" : " and tls:" + listen_tcp.substr(0, listen_tcp.rfind(':')) + ":" + std::to_string(tcp_port),
                 state_dir);

    std::atomic<bool> stop{false};
    std::thread loop([&] {
      while (!stop) {
        ctl.WaitForWork(cycle_ms);
        if (stop) break;
        try {
          int64_t now = WallNow();
          ctl.Tick(now);
          ctl.RunCycle(now);
        } catch (const std::exception& e) {
          spdlog::error("scheduling loop: {}", e.what());
          ctl.CountInternalError();  // e.g. the store failed; the next cycle tries again
        }
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
    stop = true;
    ctl.Trigger();
    loop.join();
    listener.Stop();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    return 0;
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
