#include "trainer/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {
namespace {

void CheckCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

NcclCommunicator::NcclCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options, int device)
    : env_(env), options_(options), device_(device) {
  CheckCuda(cudaSetDevice(device_), "cudaSetDevice");
  server_ = StartRendezvousStore(env_);
  KvClient client = ConnectRendezvousStore(env_, server_.get(), options_.rendezvous_timeout);
  const std::string key = env_.KeyScope() + "nccl/unique_id";
  ncclUniqueId id;
  if (env_.rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) throw std::runtime_error("ncclGetUniqueId failed");
    client.Set(key, std::string(id.internal, sizeof(id.internal)));
  } else {
    client.WaitAll({key}, options_.rendezvous_timeout);
    auto value = client.TryGet(key);
    if (!value || value->size() != sizeof(id.internal)) throw PeerLostError("rendezvous: malformed NCCL unique id in the store");
    std::memcpy(id.internal, value->data(), sizeof(id.internal));
  }
  cudaStream_t stream = nullptr;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = stream;
  CheckCuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), 2 * sizeof(uint64_t) * static_cast<size_t>(env_.world_size)), "cudaMalloc");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, env_.world_size, id, env_.rank, &config);
  comm_ = comm;
  initializing_ = true;
  Wait("NCCL communicator init", static_cast<int>(r));
  initializing_ = false;
  LogInfo("connected " + std::to_string(env_.world_size) + " ranks over NCCL on GPU " + std::to_string(device_));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr && !aborted_) {
    // Non-blocking communicator: finalize (flushes outstanding work) and poll it against the
    // deadline, then destroy; abort instead when a peer never finishes.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + options_.collective_timeout;
    while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }
  if (staging_ != nullptr) cudaFree(staging_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::Wait(const char* what, int result) {
  if (aborted_) throw PeerLostError(std::string(what) + ": communicator was aborted");
  const auto deadline = std::chrono::steady_clock::now() + options_.collective_timeout;
  ncclResult_t state = static_cast<ncclResult_t>(result);
  auto fail = [&](const std::string& why) {
    Abort();
    throw PeerLostError(std::string(what) + " failed: " + why);
  };
  // ncclInvalidUsage at init is the job's set-up, not a lost peer (exit 76 would say "a rank did
  // not arrive"): seen on an H100 with two ranks on one GPU, which NCCL refuses. An error (exit 1).
  auto fail_state = [&](ncclResult_t bad) {
    if (bad != ncclInvalidUsage || !initializing_) fail(ncclGetErrorString(bad));
    Abort();
    throw std::runtime_error(std::string(what) + " failed on GPU " + std::to_string(device_) + ": " + ncclGetErrorString(bad) +
                             "; most often two ranks share this GPU, and NCCL needs one GPU per rank");
  };
  if (state != ncclSuccess && state != ncclInProgress) fail_state(state);
  // Non-blocking init/enqueue: wait for the communicator to leave ncclInProgress.
  while (state == ncclInProgress) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) fail("ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) fail_state(state);
    if (std::chrono::steady_clock::now() > deadline) fail("timed out (a peer died or did not arrive)");
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  // Then for the stream to drain, watching for asynchronous NCCL errors (a peer that died). The
  // first millisecond spins (a step's all-reduce takes tens of microseconds on NVLink, less than
  // one sleep), then it polls every 50 us.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  while (true) {
    cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) fail(cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) fail_state(async);
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline)
      fail("timed out after " + std::to_string(options_.collective_timeout.count() / 1000.0) + " s (a peer died or stalled)");
    if (now < spin_until)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclCommunicator::AllReduceSum(std::span<float> data) {
  Wait("all-reduce", ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm_, stream_));
}

void NcclCommunicator::ReduceScatterSum(std::span<float> data) {
  ncclResult_t r = ncclGroupStart();
  for (int owner = 0; owner < env_.world_size && r == ncclSuccess; ++owner) {
    SampleRange b = BlockRange(static_cast<int64_t>(data.size()), owner, env_.world_size);
    float* p = data.data() + b.begin;
    r = ncclReduce(p, p, static_cast<size_t>(b.size()), ncclFloat, ncclSum, owner, comm_, stream_);
  }
  ncclResult_t end = ncclGroupEnd();
  Wait("reduce-scatter", r != ncclSuccess ? r : end);
}

void NcclCommunicator::AllGather(std::span<float> data) {
  ncclResult_t r = ncclGroupStart();
  for (int owner = 0; owner < env_.world_size && r == ncclSuccess; ++owner) {
    SampleRange b = BlockRange(static_cast<int64_t>(data.size()), owner, env_.world_size);
    float* p = data.data() + b.begin;
    r = ncclBroadcast(p, p, static_cast<size_t>(b.size()), ncclFloat, owner, comm_, stream_);
  }
  ncclResult_t end = ncclGroupEnd();
  Wait("all-gather", r != ncclSuccess ? r : end);
}

std::vector<uint64_t> NcclCommunicator::AllGatherWord(uint64_t word) {
  auto* words = reinterpret_cast<uint64_t*>(scratch_);
  CheckCuda(cudaMemcpyAsync(words + env_.rank, &word, sizeof(word), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
  Wait("all-gather", ncclAllGather(words + env_.rank, words, 1, ncclUint64, comm_, stream_));
  std::vector<uint64_t> out(static_cast<size_t>(env_.world_size));
  CheckCuda(cudaMemcpy(out.data(), words, out.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return out;
}

// Host bytes: root copies them to the device staging buffer, NCCL broadcasts that, the others copy
// it back to their host buffer. The staging buffer only grows (resume broadcasts the parameters and
// moments once; later calls carry one byte).
void NcclCommunicator::Broadcast(std::span<uint8_t> bytes, int root) {
  if (bytes.empty()) return;
  if (bytes.size() > staging_bytes_) {
    if (staging_ != nullptr) CheckCuda(cudaFree(staging_), "cudaFree(broadcast staging)");
    staging_ = nullptr;
    staging_bytes_ = 0;
    CheckCuda(cudaMalloc(reinterpret_cast<void**>(&staging_), bytes.size()), "cudaMalloc(broadcast staging)");
    staging_bytes_ = bytes.size();
  }
  if (env_.rank == root)
    CheckCuda(cudaMemcpyAsync(staging_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(broadcast H2D)");
  Wait("broadcast", ncclBroadcast(staging_, staging_, bytes.size(), ncclUint8, root, comm_, stream_));
  if (env_.rank == root) return;
  CheckCuda(cudaMemcpyAsync(bytes.data(), staging_, bytes.size(), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(broadcast D2H)");
  CheckCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(broadcast D2H)");
}

void NcclCommunicator::Barrier() {
  Wait("barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
}

void NcclCommunicator::Abort() noexcept {
  if (aborted_ || comm_ == nullptr) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

}  // namespace mltrain
