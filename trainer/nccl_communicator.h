// NCCL: the GPU backend of the Communicator interface (built only when CUDA and NCCL are found
// and MLSCHED_WITH_CUDA is on).
#pragma once

#include <memory>

#include "trainer/communicator.h"
#include "trainer/kv_store.h"

struct ncclComm;
struct CUstream_st;

namespace mltrain {

/// NCCL communicator on one GPU per rank. Buffer contract (unlike the CPU backends, which take host
/// memory everywhere):
///  - AllReduceSum, ReduceScatterSum and AllGather take DEVICE memory on `device` (the engine's
///    GradBuffer()/ParamBuffer(), which return only after the engine's own stream drained);
///  - Broadcast takes HOST memory (the trainer's resume header, parameters and moments; the
///    checkpoint manager's commit byte), staged through a grow-only device buffer;
///  - AllGatherWord takes and returns host values.
/// Every call returns only after NCCL's stream drained, so the buffers may be used on any stream.
/// Rendezvous: rank 0 serves the key-value store (KvServer on MASTER_ADDR:MASTER_PORT, requiring
/// MLSCHED_RENDEZVOUS_TOKEN) and publishes the NCCL
/// unique id under the job's key scope; the others read it within the rendezvous deadline.
/// The communicator is non-blocking (ncclConfig_t.blocking = 0): init and every collective are
/// polled (ncclCommGetAsyncError, cudaStreamQuery) against a deadline, and on an error or timeout
/// the communicator is aborted (ncclCommAbort) and PeerLostError thrown, because NCCL can otherwise
/// hang forever when a peer dies. ncclInvalidUsage during init (two ranks on one GPU, say) throws
/// std::runtime_error instead: a set-up error (exit 1), not a lost peer (exit 76).
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options, int device);
  ~NcclCommunicator() override;

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  std::string backend() const override { return "nccl"; }
  void AllReduceSum(std::span<float> data) override;
  /// Grouped ncclReduce of each rank's block to that rank (blocks may differ in size).
  void ReduceScatterSum(std::span<float> data) override;
  /// Grouped ncclBroadcast of each rank's block from that rank.
  void AllGather(std::span<float> data) override;
  std::vector<uint64_t> AllGatherWord(uint64_t word) override;
  /// `bytes` is host memory (see the class comment).
  void Broadcast(std::span<uint8_t> bytes, int root) override;
  void Barrier() override;
  void Abort() noexcept override;

 private:
  /// Waits until the enqueued work finished, failing on NCCL async errors or the deadline.
  void Wait(const char* what, int result);

  RendezvousEnv env_;
  CommunicatorOptions options_;
  int device_ = 0;
  std::unique_ptr<KvServer> server_;  // rank 0 only
  ncclComm* comm_ = nullptr;
  CUstream_st* stream_ = nullptr;
  float* scratch_ = nullptr;  // device scratch: barrier value and gathered words
  uint8_t* staging_ = nullptr;  // device copy of Broadcast's host bytes (grow-only)
  size_t staging_bytes_ = 0;
  bool aborted_ = false;
  bool initializing_ = false;  ///< inside the communicator init's Wait (ncclInvalidUsage is then a set-up error)
};

}  // namespace mltrain
