// NCCL all-reduce bandwidth through mltrain's NcclCommunicator, reported like nccl-tests:
// algbw = bytes / time, busbw = algbw * 2(n-1)/n. One process per GPU; rank, world size and the
// rendezvous come from the env (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
// Usage: nccl_allreduce_bench [max MiB, default 256]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "trainer/log.h"
#include "trainer/nccl_communicator.h"

int main(int argc, char** argv) {
  using namespace mltrain;
  try {
    const size_t max_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
    RendezvousEnv env = ReadRendezvousEnv();
    if (env.world_size == 1 && env.master_addr.empty()) {
      env.master_addr = "127.0.0.1";
      env.master_port = 0;  // KvServer picks a port; a single rank never connects elsewhere
    }
    CommunicatorOptions options;
    NcclCommunicator comm(env, options, env.local_rank);
    float* data = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&data), max_mib << 20) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    cudaMemset(data, 0, max_mib << 20);
    if (env.rank == 0) std::printf("%10s %12s %12s %12s\n", "MiB", "time us", "algbw GB/s", "busbw GB/s");
    for (size_t mib = 1; mib <= max_mib; mib *= 2) {
      std::span<float> buf(data, (mib << 20) / sizeof(float));
      for (int i = 0; i < 3; ++i) comm.AllReduceSum(buf);  // warm-up
      const int reps = 20;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < reps; ++i) comm.AllReduceSum(buf);
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      double algbw = static_cast<double>(mib << 20) / t / 1e9;
      double busbw = algbw * 2.0 * (env.world_size - 1) / env.world_size;
      if (env.rank == 0) std::printf("%10zu %12.1f %12.2f %12.2f\n", mib, t * 1e6, algbw, busbw);
    }
    cudaFree(data);
    return 0;
  } catch (const PeerLostError& e) {
    LogError(std::string("peer lost: ") + e.what());
    return kExitPeerLost;
  } catch (const std::exception& e) {
    LogError(e.what());
    return 1;
  }
}
