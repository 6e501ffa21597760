// Benchmark of schedd's front door (not a test). Starts its own schedd in a temp dir and measures:
//  (a) durable submissions/s with one mlsub process per job, sequentially;
//  (b) durable submissions/s through the gRPC API with C concurrent clients (default 8);
//  (c) mlq latency (median of 10 runs, full table) and schedd's resident memory per pending job
//      with N jobs (default 10,000) in the queue.
// Jobs are submitted held (like the Slurm peer's held-job runs) so the figures isolate the
// submission path; (b) sends a submission key with each job, as mlsub does. (a) and (b) run through schedd's Unix socket and through TCP with TLS + MUNGE
// (private CA and munged) in the same run, so the ratio is the cost of security.
// Usage: bench_schedd [N] [C] [mlsub_jobs]
//        bench_schedd --rate SERVER JOBS [C]: only (b), against a running schedd (or the list of HA
//        replicas' leader), with MLSCHED_TLS_CA / MLSCHED_MUNGE_SOCKET from the environment; prints
//        "rate SERVER: X durable submissions/s (JOBS jobs, C clients, E errors)".
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sstream>

#include "common/client.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "tests/security/fixtures.h"

extern char** environ;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

/// Starts argv; quiet: output to /dev/null; `log` (when set): stdout and stderr appended there.
pid_t Spawn(std::vector<std::string> argv, bool quiet, const std::string& log = "") {
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet || !log.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, log.empty() ? "/dev/null" : log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  pid_t pid = -1;
  posix_spawn(&pid, a[0], &fa, nullptr, a.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

int RunQuiet(std::vector<std::string> argv) {
  pid_t p = Spawn(std::move(argv), true);
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

long RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

mlsched::v1::JobSpec HeldSpec() {
  mlsched::v1::JobSpec s;
  s.set_ntasks(1);
  s.set_cpu_millis_per_task(1000);
  s.set_hold(true);
  s.set_name("bench");
  s.add_argv("/bin/true");
  s.set_workdir("/tmp");
  return s;
}

}  // namespace

/// Submission rates through one transport: (a) one mlsub process per job, (b) C concurrent gRPC
/// clients with their own channels. `server` is "unix:PATH" or "127.0.0.1:PORT" (TLS + MUNGE).
struct Rates {
  double mlsub_per_s = 0, grpc_per_s = 0;
  int failed = 0, errors = 0;
};
Rates Measure(const std::string& server, int mlsub_jobs, int grpc_jobs, int clients) {
  Rates r;
  setenv("MLSCHED_SERVER", server.c_str(), 1);
  auto t0 = Clock::now();
  for (int i = 0; i < mlsub_jobs; ++i) r.failed += RunQuiet({MLSCHED_MLSUB_BIN, "-H", "-D", "/tmp", "--wrap", "true"}) != 0;
  r.mlsub_per_s = mlsub_jobs ? mlsub_jobs / Seconds(t0, Clock::now()) : 0;
  std::atomic<int> next{0}, errors{0};
  std::vector<std::thread> threads;
  t0 = Clock::now();
  const std::string key_prefix = "bench-" + std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()) + "-";
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = mlsched::v1::JobService::NewStub(mlsched::MakeChannel(server));
      mlsched::v1::SubmitJobRequest req;
      *req.mutable_spec() = HeldSpec();
      for (int i; (i = next.fetch_add(1)) < grpc_jobs;) {
        req.set_submission_key(key_prefix + std::to_string(i));  // as mlsub sends (idempotent retries)
        grpc::ClientContext ctx;
        mlsched::PrepareContext(ctx, server, 30);
        mlsched::v1::SubmitJobResponse resp;
        if (grpc::Status st = stub->SubmitJob(&ctx, req, &resp); !st.ok()) {
          if (errors++ == 0) std::fprintf(stderr, "SubmitJob on %s: %s\n", server.c_str(), st.error_message().c_str());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  r.grpc_per_s = grpc_jobs / Seconds(t0, Clock::now());
  r.errors = errors.load();
  return r;
}

constexpr const char* kUsage =
    "usage: bench_schedd [N=10000] [C=8] [MLSUB_JOBS=300]   (N >= 2 x MLSUB_JOBS + 2, C <= 4096)\n"
    "       bench_schedd --rate SERVER JOBS [C=8]\n";

/// `text` as a count in [min, max]; exits 2 with the usage otherwise.
int Count(const char* text, const char* what, long min = 1, long max = 100000000) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < min || v > max) {
    std::fprintf(stderr, "bench_schedd: %s must be a whole number from %ld to %ld, got '%s'\n%s", what, min, max, text,
                 kUsage);
    std::exit(2);
  }
  return static_cast<int>(v);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--rate") {
    if (argc < 4 || argc > 5) {
      std::fprintf(stderr, "%s", kUsage);
      return 2;
    }
    const int jobs = Count(argv[3], "JOBS"), c = argc > 4 ? Count(argv[4], "C", 1, 4096) : 8;
    Rates r = Measure(argv[2], 0, jobs, c);
    std::printf("rate %s: %.1f durable submissions/s (%d jobs, %d clients, %d errors)\n", argv[2], r.grpc_per_s, jobs, c,
                r.errors);
    return r.errors == 0 ? 0 : 1;
  }
  if (argc > 4) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const int n = argc > 1 ? Count(argv[1], "N") : 10000;
  const int clients = argc > 2 ? Count(argv[2], "C", 1, 4096) : 8;
  const int mlsub_jobs = argc > 3 ? Count(argv[3], "MLSUB_JOBS", 0) : 300;
  if (n < 2 * mlsub_jobs + 2) {  // half of the rest goes through each transport
    std::fprintf(stderr, "bench_schedd: N (%d) must be at least 2 x MLSUB_JOBS + 2 (%d)\n%s", n, 2 * mlsub_jobs + 2,
                 kUsage);
    return 2;
  }
  std::random_device rd;
  fs::path dir = fs::temp_directory_path() / ("mlsched-bench-" + std::to_string(rd()));
  fs::create_directories(dir);
  // TLS + MUNGE as in production: a private CA and munged (tests/security/fixtures.h).
  mlsched::testing::PrivateMunged munged(dir / "munge");
  if (!munged.ok() || !mlsched::testing::MakeCluster(dir / "tls", {})) {
    std::fprintf(stderr, "bench_schedd: needs munged, mungekey and openssl (scripts/install-deps.sh)\n");
    return 2;
  }
  setenv("MLSCHED_TLS_CA", (dir / "tls/ca.pem").c_str(), 1);
  setenv("MLSCHED_MUNGE_SOCKET", munged.Socket().c_str(), 1);
  std::string sock = (dir / "schedd.sock").string(), server = "unix:" + sock;
  setenv("MLSCHED_SERVER", server.c_str(), 1);
  fs::path log = dir / "schedd.log";
  pid_t schedd = Spawn({MLSCHED_SCHEDD_BIN, "--listen", server, "--state-dir", (dir / "state").string(), "--listen-tcp",
                        "127.0.0.1:0", "--tls-cert", (dir / "tls/schedd.pem").string(), "--tls-key",
                        (dir / "tls/schedd.key").string(), "--tls-ca", (dir / "tls/ca.pem").string(), "--munge-socket",
                        munged.Socket(), "--log-level", "info"}, false, log.string());
  for (int i = 0; i < 100 && RunQuiet({MLSCHED_MLQ_BIN}) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string tls;
  {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    auto at = text.find("and tls:");
    if (at != std::string::npos) tls = text.substr(at + 8, text.find_first_of(", \n", at + 8) - at - 8);
  }
  if (tls.empty()) {
    std::fprintf(stderr, "bench_schedd: schedd did not report its TLS port (%s)\n", log.c_str());
    return 2;
  }
  long rss0 = RssKb(schedd);

  // Both transports in one run, on one schedd: half of the gRPC jobs through each.
  int grpc_jobs = (n - 2 * mlsub_jobs) / 2;
  Rates unix_rates = Measure(server, mlsub_jobs, grpc_jobs, clients);
  Rates tls_rates = Measure(tls, mlsub_jobs, grpc_jobs, clients);
  setenv("MLSCHED_SERVER", server.c_str(), 1);
  int failed = unix_rates.failed + tls_rates.failed;

  // (c) mlq latency and memory with n jobs queued.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // let a scheduling cycle pass
  std::vector<double> lat;
  for (int i = 0; i < 10; ++i) {
    auto s = Clock::now();
    RunQuiet({MLSCHED_MLQ_BIN});
    lat.push_back(Seconds(s, Clock::now()) * 1000);
  }
  std::sort(lat.begin(), lat.end());
  long rss1 = RssKb(schedd);
  double per_job = (rss1 - rss0) * 1024.0 / n;

  std::printf("jobs in queue            %d (held, 1 task each)\n", n);
  for (auto [name, r] : {std::pair{"unix socket (SO_PEERCRED)", unix_rates}, std::pair{"TCP, TLS + MUNGE", tls_rates}}) {
    std::printf("%s:\n", name);
    std::printf("  (a) mlsub per job      %.1f durable submissions/s (%d jobs, %d failed)\n", r.mlsub_per_s, mlsub_jobs, r.failed);
    std::printf("  (b) gRPC, %d clients    %.1f durable submissions/s (%d jobs, %d errors)\n", clients, r.grpc_per_s, grpc_jobs,
                r.errors);
  }
  if (mlsub_jobs > 0)
    std::printf("cost of security (TLS+MUNGE / unix): mlsub %.2fx, gRPC %.2fx\n",
                tls_rates.mlsub_per_s / unix_rates.mlsub_per_s, tls_rates.grpc_per_s / unix_rates.grpc_per_s);
  else
    std::printf("cost of security (TLS+MUNGE / unix): gRPC %.2fx\n", tls_rates.grpc_per_s / unix_rates.grpc_per_s);
  std::printf("(c) mlq, full table      median %.1f ms, max %.1f ms\n", lat[lat.size() / 2], lat.back());
  std::printf("    schedd RSS           %ld KB idle -> %ld KB with the queue: %.0f bytes per pending job\n", rss0, rss1,
              per_job);
  std::printf("{\"jobs\":%d,\"mlsub_per_s\":%.1f,\"grpc_per_s\":%.1f,\"tls_mlsub_per_s\":%.1f,\"tls_grpc_per_s\":%.1f,"
              "\"clients\":%d,\"mlq_median_ms\":%.1f,\"rss_bytes_per_job\":%.0f}\n",
              n, unix_rates.mlsub_per_s, unix_rates.grpc_per_s, tls_rates.mlsub_per_s, tls_rates.grpc_per_s, clients,
              lat[lat.size() / 2], per_job);
  kill(schedd, SIGTERM);
  waitpid(schedd, nullptr, 0);
  fs::remove_all(dir);
  return failed + unix_rates.errors + tls_rates.errors == 0 ? 0 : 1;
}
