// Gloo over TCP: the CPU backend of the Communicator interface.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "trainer/communicator.h"
#include "trainer/kv_store.h"
#include "trainer/shm_allreduce.h"

namespace gloo {
class Context;
class Algorithm;
namespace transport {
class Device;
}
}  // namespace gloo

namespace mltrain {

/// Gloo TCP transport with the legacy AllreduceRingChunked / AllreduceHalvingDoubling algorithms
/// (the legacy classes measured 5-50x faster than the newer gloo::allreduce entry point on this
/// machine). Both reduce every element on exactly one rank and then distribute it, so all ranks get
/// bit-identical sums; plain AllreduceRing adds in a per-rank order, which lets replicas drift.
/// ReduceScatterSum is gloo::alltoallv plus a local sum in rank order (Gloo's legacy
/// ReduceScatterHalvingDoubling is wrong for worlds that are not a power of two: trainer/README.md);
/// AllGather is gloo::allgatherv. Rank 0 serves the rendezvous store (KvServer, token-protected);
/// every rank publishes its Gloo address there under the job's key scope and connects a full mesh.
/// Gloo errors and timeouts surface as PeerLostError.
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  std::string backend() const override { return "gloo-" + options_.allreduce_algorithm; }
  void AllReduceSum(std::span<float> data) override;
  void ReduceScatterSum(std::span<float> data) override;
  void AllGather(std::span<float> data) override;
  std::vector<uint64_t> AllGatherWord(uint64_t word) override;
  void Broadcast(std::span<uint8_t> bytes, int root) override;
  void Barrier() override;
  void Abort() noexcept override;

 private:
  template <typename Fn>
  void Guard(const char* what, Fn&& fn);
  /// Once, at the first all-reduce (collective): when every rank runs on this host, maps a
  /// shared segment of `capacity` floats per rank (ShmAllReducer); on any failure all ranks keep
  /// Gloo, with a warning.
  void SetUpSharedMemory(size_t capacity);
  std::string SharedMemoryName() const;
  static uint64_t HostWord();
  /// Connects a full mesh of this job's ranks, rendezvousing under `prefix` in the job's key scope.
  std::shared_ptr<gloo::Context> ConnectMesh(KvClient& client, const std::string& prefix,
                                             std::shared_ptr<gloo::transport::Device>& device);

  RendezvousEnv env_;
  CommunicatorOptions options_;
  std::unique_ptr<KvServer> server_;  // rank 0 only
  std::shared_ptr<gloo::Context> context_;            // async pairs: every collective but the all-reduce
  std::shared_ptr<gloo::Context> allreduce_context_;  // sync pairs (CommunicatorOptions::sync_io), or context_
  // Legacy algorithms bind their buffers at construction: cache them per (pointer, count).
  std::map<std::pair<const void*, size_t>, std::unique_ptr<gloo::Algorithm>> allreduce_cache_;
  std::vector<float> reduce_scatter_scratch_;  // world copies of this rank's block, then summed
  bool aborted_ = false;
  /// Sets up shared memory on the first call (collective) and says whether a collective of
  /// `count` floats goes through it; the same answer on every rank.
  bool UseSharedMemory(size_t count);
  bool shm_tried_ = false;
  std::unique_ptr<ShmAllReducer> shm_;  // all-reduce when every rank shares this host
};

}  // namespace mltrain
