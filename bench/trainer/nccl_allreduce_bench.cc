// NCCL all-reduce bandwidth through mltrain's NcclCommunicator, reported like nccl-tests:
// algbw = bytes / time, busbw = algbw * 2(n-1)/n (the per-link traffic of a ring all-reduce, so the
// figure is comparable across GPU counts). Sizes double from 1 MiB to [max MiB] (default 1024).
// One process per GPU; rank, world size and the rendezvous come from the env (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, MLSCHED_RENDEZVOUS_TOKEN); bench/trainer/gpu_check.sh
// launches it. Before timing, one all-reduce of rank+1 everywhere is checked against n(n+1)/2.
// The time per call is host wall time: it includes the communicator's completion polling.
// Usage: nccl_allreduce_bench [max MiB, default 1024]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/log.h"
#include "trainer/nccl_communicator.h"

namespace {

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

/// All-reduces rank+1 over `count` floats and checks every element equals n(n+1)/2.
void CheckSum(mltrain::NcclCommunicator& comm, float* data, size_t count) {
  std::vector<float> host(count, static_cast<float>(comm.rank() + 1));
  Check(cudaMemcpy(data, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  comm.AllReduceSum({data, count});
  Check(cudaMemcpy(host.data(), data, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  const float n = static_cast<float>(comm.world_size()), expected = n * (n + 1) / 2;
  for (size_t i = 0; i < count; ++i)
    if (host[i] != expected)
      throw std::runtime_error("all-reduce check: element " + std::to_string(i) + " is " + std::to_string(host[i]) +
                               ", expected " + std::to_string(expected));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mltrain;
  try {
    const size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
    if (max_mib < 1) throw std::invalid_argument("max MiB must be >= 1");
    RendezvousEnv env = ReadRendezvousEnv();
    if (env.world_size == 1 && env.master_addr.empty()) {
      env.master_addr = "127.0.0.1";
      env.master_port = 0;  // KvServer picks a port; a single rank never connects elsewhere
    }
    CommunicatorOptions options;
    NcclCommunicator comm(env, options, env.local_rank);
    float* data = nullptr;
    Check(cudaMalloc(reinterpret_cast<void**>(&data), max_mib << 20), "cudaMalloc");
    CheckSum(comm, data, (size_t{1} << 20) / sizeof(float));
    Check(cudaMemset(data, 0, max_mib << 20), "cudaMemset");  // zeros stay zeros: no inf/NaN while timing
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (env.rank == 0) {
      std::printf("# nccl all-reduce, %d rank(s), sum check passed\n", env.world_size);
      // One rank has nothing to exchange: NCCL's in-place all-reduce then returns without moving
      // data (0.8 us for 1 GiB on an H100), so its algbw is no bandwidth at all.
      if (env.world_size == 1) std::printf("# 1 rank: nothing is exchanged, so algbw is not a bandwidth and busbw is 0\n");
      std::printf("%10s %12s %12s %12s\n", "MiB", "time us", "algbw GB/s", "busbw GB/s");
    }
    for (size_t mib = 1; mib <= max_mib; mib *= 2) {
      std::span<float> buf(data, (mib << 20) / sizeof(float));
      for (int i = 0; i < 3; ++i) comm.AllReduceSum(buf);  // warm-up
      const int reps = mib >= 256 ? 10 : 20;
      comm.Barrier();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) comm.AllReduceSum(buf);
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      double algbw = static_cast<double>(mib << 20) / t / 1e9;
      double busbw = algbw * 2.0 * (env.world_size - 1) / env.world_size;
      if (env.rank == 0) std::printf("%10zu %12.1f %12.2f %12.2f\n", mib, t * 1e6, algbw, busbw);
      std::fflush(stdout);
    }
    Check(cudaFree(data), "cudaFree");
    return 0;
  } catch (const PeerLostError& e) {
    LogError(std::string("peer lost: ") + e.what());
    return kExitPeerLost;
  } catch (const std::exception& e) {
    LogError(e.what());
    return 1;
  }
}
