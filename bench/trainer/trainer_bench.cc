// mltrain benchmarks: seconds per epoch (1 and 2 ranks), Gloo all-reduce (and reduce-scatter +
// all-gather) GB/s beside memcpy, checkpoint write MB/s (directory, and s3rver when tools/s3 is
// installed), SIGTERM-to-exit-75.
// Usage: trainer_bench [--quick]   (--quick: fewer repetitions, smaller buffers)
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include "tests/trainer/test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/communicator.h"
#include "trainer/log.h"
#include "trainer/s3_store.h"

using namespace mltrain;
using namespace mltrain::testing;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

/// Runs mltrain for `epochs` full epochs on `world` ranks (1 OpenBLAS thread each, `extra` flags);
/// returns train seconds per epoch and the seconds rank 0 spent in collectives per epoch.
std::pair<double, double> SecondsPerEpoch(int world, const TempDir& dir, int epochs, const std::vector<std::string>& extra) {
  const std::string metrics = dir / ("epoch" + std::to_string(world) + ".json");
  std::vector<std::string> args{MLTRAIN_BINARY, "--epochs", std::to_string(epochs), "--threads", "1", "--log-every", "100000",
                                "--test-limit", "1", "--metrics-out", metrics};
  args.insert(args.end(), extra.begin(), extra.end());
  int port = FreePort();
  std::vector<std::unique_ptr<Child>> ranks;
  for (int r = 0; r < world; ++r) {
    auto env = world == 1 ? std::map<std::string, std::string>{{"WORLD_SIZE", "1"}} : RankEnv(r, world, port, "bench");
    env["LOCAL_WORLD_SIZE"] = std::to_string(world);
    ranks.push_back(std::make_unique<Child>(args, env, dir / ("epoch" + std::to_string(world) + "." + std::to_string(r) + ".log")));
  }
  for (auto& r : ranks) {
    if (r->Wait(600) != 0) throw std::runtime_error("mltrain failed; see " + (dir / "epoch*.log"));
  }
  auto m = nlohmann::json::parse(ReadFile(metrics));
  return {m.at("train_s").get<double>() / epochs, m.value("collective_s", 0.0) / epochs};
}

void BenchEpochs(const TempDir& dir, bool quick) {
  const int epochs = quick ? 1 : 3;
  std::printf("\n== seconds per epoch (Fashion-MNIST 60k, 784-256-128-10, batch 128, AdamW, 1 OpenBLAS thread/rank, "
              "mean of %d epochs; this machine has %u cores) ==\n", epochs, std::thread::hardware_concurrency());
  std::printf("  %-6s %-22s %9s %12s %10s %14s\n", "ranks", "all-reduce", "s/epoch", "samples/s", "x 1 rank", "collectives s");
  double one = 0;
  struct Variant {
    const char* name;
    std::vector<std::string> flags;
  };
  const std::vector<Variant> variants{{"shared memory", {}},
                                      {"shared memory, ZeRO-1", {"--zero1"}},
                                      {"Gloo TCP (sync pairs)", {"--no-shm-allreduce"}}};
  for (int world : {1, 2, 4}) {
    for (const Variant& v : variants) {
      if (world == 1 && !v.flags.empty()) continue;
      auto [s, comm] = SecondsPerEpoch(world, dir, epochs, v.flags);
      if (world == 1) one = s;
      std::printf("  %-6d %-22s %9.2f %12.0f %9.2fx %14.2f\n", world, world == 1 ? "-" : v.name, s, 60000.0 / s, one / s, comm);
    }
  }
}

void BenchAllReduce(bool quick) {
  std::printf("\n== Gloo all-reduce over loopback, 2 ranks (algbw = bytes/time; busbw = algbw * 2(n-1)/n) ==\n");
  std::printf("  (rs+allgather: ReduceScatterSum then AllGather, the same result as an all-reduce)\n");
  std::printf("  %8s %12s %12s %12s %12s %14s\n", "MiB", "algorithm", "time ms", "algbw GB/s", "busbw GB/s", "memcpy GB/s");
  std::vector<size_t> sizes_mib = quick ? std::vector<size_t>{1, 16} : std::vector<size_t>{1, 4, 16, 64};
  for (std::string algorithm : {"ring", "halving-doubling", "rs+allgather"}) {
    for (size_t mib : sizes_mib) {
      const size_t count = mib * (1u << 20) / sizeof(float);
      const int reps = quick ? 3 : (mib >= 16 ? 5 : 20);
      int port = FreePort();
      std::vector<std::future<double>> ranks;
      for (int r = 0; r < 2; ++r) {
        ranks.push_back(std::async(std::launch::async, [=] {
          RendezvousEnv env;
          env.rank = r;
          env.world_size = 2;
          env.master_addr = "127.0.0.1";
          env.master_port = port;
          env.job_id = "bench";
          env.attempt = "0";
          CommunicatorOptions options;
          options.allreduce_algorithm = algorithm == "rs+allgather" ? "ring" : algorithm;
          auto comm = CreateCommunicator(env, options);
          std::vector<float> data(count, 1.0f);
          auto sum = [&] {
            if (algorithm != "rs+allgather") return comm->AllReduceSum(data);
            comm->ReduceScatterSum(data);
            comm->AllGather(data);
          };
          sum();  // warm-up (connects buffers)
          comm->Barrier();
          auto t0 = Clock::now();
          for (int i = 0; i < reps; ++i) sum();
          double t = Seconds(t0) / reps;
          comm->Barrier();
          return t;
        }));
      }
      double t = std::max(ranks[0].get(), ranks[1].get());
      std::vector<char> src(mib << 20, 1), dst(mib << 20);
      std::memcpy(dst.data(), src.data(), src.size());
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) std::memcpy(dst.data(), src.data(), src.size());
      double tm = Seconds(t0) / reps;
      double gb = static_cast<double>(mib << 20) / 1e9;
      std::printf("  %8zu %12s %12.2f %12.2f %12.2f %14.2f\n", mib, algorithm.c_str(), t * 1e3, gb / t, gb / t * 2 * (2 - 1) / 2, gb / tm);
    }
  }
}

TrainingState SyntheticState(size_t params) {
  TrainingState s;
  s.step = 1;
  s.config = {{"layers", {784, 256, 128, 10}}, {"optimizer", "adamw"}};
  s.params.assign(params, 0.5f);
  s.first_moment.assign(params, 0.25f);
  s.second_moment.assign(params, 0.125f);
  return s;
}

double CheckpointMBps(ObjectStore& store, size_t params, int reps) {
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 2);
  TrainingState s = SyntheticState(params);
  double bytes = static_cast<double>(params) * 3 * sizeof(float);
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    s.step = i + 1;
    if (!ckpt.Save(s)) throw std::runtime_error("checkpoint save failed");
  }
  return bytes * reps / Seconds(t0) / 1e6;
}

void BenchCheckpoints(const TempDir& dir, bool quick) {
  std::printf("\n== checkpoint write (params + AdamW moments, shard + manifest + LATEST, fsync) ==\n");
  const size_t mlp = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;
  LocalDirStore local((dir / "ckpt-dir"));
  for (size_t params : {mlp, size_t{16} << 20}) {
    double mbps = CheckpointMBps(local, params, quick ? 2 : 5);
    std::printf("  directory, %7.1f MB state: %8.1f MB/s\n", params * 12 / 1e6, mbps);
  }
  const std::string script = std::string(MLSCHED_S3_TOOLS_DIR) + "/s3-test-server.js";
  if (!std::filesystem::exists(std::string(MLSCHED_S3_TOOLS_DIR) + "/node_modules/s3rver")) {
    std::printf("  s3rver: skipped (run npm ci in tools/s3)\n");
    return;
  }
  std::filesystem::create_directories(dir / "s3data");
  Child server({"/usr/bin/node", script, dir / "s3data", "ckpt"}, {}, dir / "s3.log");
  int port = 0;
  for (int i = 0; i < 400 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string text = ReadFile(dir / "s3.log");
    if (auto pos = text.find("READY "); pos != std::string::npos && text.find('\n', pos) != std::string::npos) port = std::stoi(text.substr(pos + 6));
  }
  if (port == 0) {
    std::printf("  s3rver: failed to start (see %s)\n", (dir / "s3.log").c_str());
    return;
  }
  S3Credentials creds;
  creds.endpoint = "http://127.0.0.1:" + std::to_string(port);
  creds.access_key_id = creds.secret_access_key = "S3RVER";
  S3Store s3(S3Location::Parse("s3://ckpt/bench"), creds, 64u << 20, 8u << 20);
  for (size_t params : {mlp, size_t{4} << 20}) {
    double mbps = CheckpointMBps(s3, params, quick ? 1 : 3);
    std::printf("  s3rver via SigV4-verifying proxy, %7.1f MB state: %8.1f MB/s\n", params * 12 / 1e6, mbps);
  }
  server.Signal(SIGTERM);
  server.Wait(5);
}

void BenchPreemption(const TempDir& dir) {
  std::printf("\n== SIGTERM to exit 75 (2 ranks, full model, checkpoint to a directory) ==\n");
  std::vector<std::string> args{MLTRAIN_BINARY, "--epochs", "50", "--threads", "1", "--log-every", "20",
                                "--checkpoint-url", "file://" + (dir / "preempt")};
  int port = FreePort();
  std::vector<std::unique_ptr<Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto env = RankEnv(r, 2, port, "bench-preempt");
    env["MLSCHED_STATUS_FILE"] = dir / ("preempt." + std::to_string(r) + ".json");
    ranks.push_back(std::make_unique<Child>(args, env, dir / ("preempt." + std::to_string(r) + ".log")));
  }
  for (int i = 0; i < 600 && !std::filesystem::exists(dir / "preempt.1.json"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = Clock::now();
  for (auto& r : ranks) r->Signal(SIGTERM);  // as agentd signals the task's process group
  int c0 = ranks[0]->Wait(60), c1 = ranks[1]->Wait(60);
  std::printf("  exit codes %d/%d after %.3f s\n", c0, c1, Seconds(t0));
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  TempDir dir;
  try {
    BenchAllReduce(quick);
    BenchCheckpoints(dir, quick);
    BenchPreemption(dir);
    BenchEpochs(dir, quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "benchmark failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
