// Benchmark of schedd's front door (not a test). Starts its own schedd in a temp dir and measures:
//  (a) durable submissions/s with one mlsub process per job, sequentially;
//  (b) durable submissions/s through the gRPC API with C concurrent clients (default 8);
//  (c) mlq latency (median of 10 runs, full table) and schedd's resident memory per pending job
//      with N jobs (default 10,000) in the queue.
// Jobs are submitted held (like the Slurm peer's held-job runs) so the figures isolate the
// submission path. Usage: bench_schedd [N] [C] [mlsub_jobs]
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/client.h"
#include "mlsched/v1/jobs.grpc.pb.h"

extern char** environ;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

pid_t Spawn(std::vector<std::string> argv, bool quiet) {
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(s.data());
  a.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (quiet) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
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

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 10000;
  int clients = argc > 2 ? std::atoi(argv[2]) : 8;
  int mlsub_jobs = argc > 3 ? std::atoi(argv[3]) : 300;
  std::random_device rd;
  fs::path dir = fs::temp_directory_path() / ("mlsched-bench-" + std::to_string(rd()));
  fs::create_directories(dir);
  std::string sock = (dir / "schedd.sock").string(), server = "unix:" + sock;
  setenv("MLSCHED_SERVER", server.c_str(), 1);
  pid_t schedd = Spawn({MLSCHED_SCHEDD_BIN, "--listen", server, "--state-dir", (dir / "state").string(),
                        "--log-level", "warn"}, false);
  for (int i = 0; i < 100 && RunQuiet({MLSCHED_MLQ_BIN}) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  long rss0 = RssKb(schedd);

  // (a) one mlsub per job.
  auto t0 = Clock::now();
  int failed = 0;
  for (int i = 0; i < mlsub_jobs; ++i) failed += RunQuiet({MLSCHED_MLSUB_BIN, "-H", "-D", "/tmp", "--wrap", "true"}) != 0;
  double a_rate = mlsub_jobs / Seconds(t0, Clock::now());

  // (b) C concurrent gRPC clients, each with its own channel.
  int remaining = n - mlsub_jobs;
  std::atomic<int> next{0}, errors{0};
  std::vector<std::thread> threads;
  t0 = Clock::now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto stub = mlsched::v1::JobService::NewStub(mlsched::MakeChannel(server));
      mlsched::v1::SubmitJobRequest req;
      *req.mutable_spec() = HeldSpec();
      while (next.fetch_add(1) < remaining) {
        grpc::ClientContext ctx;
        mlsched::PrepareContext(ctx, server, 30);
        mlsched::v1::SubmitJobResponse resp;
        if (!stub->SubmitJob(&ctx, req, &resp).ok()) errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  double b_rate = remaining / Seconds(t0, Clock::now());

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
  std::printf("(a) mlsub per job        %.1f durable submissions/s (%d jobs, %d failed)\n", a_rate, mlsub_jobs, failed);
  std::printf("(b) gRPC, %d clients      %.1f durable submissions/s (%d jobs, %d errors)\n", clients, b_rate, remaining,
              errors.load());
  std::printf("(c) mlq, full table      median %.1f ms, max %.1f ms\n", lat[lat.size() / 2], lat.back());
  std::printf("    schedd RSS           %ld KB idle -> %ld KB with the queue: %.0f bytes per pending job\n", rss0, rss1,
              per_job);
  std::printf("{\"jobs\":%d,\"mlsub_per_s\":%.1f,\"grpc_per_s\":%.1f,\"clients\":%d,\"mlq_median_ms\":%.1f,"
              "\"rss_bytes_per_job\":%.0f}\n", n, a_rate, b_rate, clients, lat[lat.size() / 2], per_job);
  kill(schedd, SIGTERM);
  waitpid(schedd, nullptr, 0);
  fs::remove_all(dir);
  return failed + errors.load() == 0 ? 0 : 1;
}
