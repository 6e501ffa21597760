#include "trainer/gloo_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {
namespace {

/// Gloo's rendezvous::Store on top of the job-scoped key-value store.
class ScopedKvStore final : public gloo::rendezvous::Store {
 public:
  ScopedKvStore(KvClient& client, std::string scope) : client_(client), scope_(std::move(scope)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    client_.Set(scope_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    auto v = client_.TryGet(scope_ + key);
    if (!v) throw PeerLostError("rendezvous: key '" + key + "' vanished from the store");
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, client_.timeout()); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> scoped;
    for (const auto& k : keys) scoped.push_back(scope_ + k);
    client_.WaitAll(scoped, std::min(timeout, client_.timeout()));
  }

 private:
  KvClient& client_;
  std::string scope_;
};

/// The local address from which this host reaches MASTER_ADDR (UDP connect, no packet sent), so
/// Gloo listens on an interface the peers can reach.
std::string LocalAddressToward(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(master_addr.c_str(), "9", &hints, &res) != 0 || res == nullptr)
    throw std::runtime_error("cannot resolve MASTER_ADDR '" + master_addr + "'");
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  bool ok = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  ::freeaddrinfo(res);
  if (fd >= 0) ::close(fd);
  if (!ok) throw std::runtime_error("no route from this host to MASTER_ADDR '" + master_addr + "'");
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
  return buf;
}

/// Bytes of the one legacy message each rank sends every peer right after connecting (see below).
constexpr size_t kSendBufferBytes = size_t{1} << 20;

/// Gloo's legacy Pair::send sets SO_SNDBUF to the largest legacy message sent on that socket so far
/// (which also switches off the kernel's send-buffer autotuning), while the unbound-buffer path of
/// alltoallv/allgatherv never raises it. After a tiny first legacy message (a barrier, a broadcast
/// header, the ZeRO-1 flags all-reduce) those collectives moved a few KiB per event-loop turn, 50 to
/// 300x slower than with autotuning (1-4 MiB over loopback). One kSendBufferBytes legacy message to
/// every peer sizes every socket first: 2 MiB of send buffer (the kernel doubles the request and
/// caps it at 2x net.core.wmem_max, 8 MiB here, 416 KiB with the usual default).
void SizeSendBuffers(gloo::Context& context) {
  const int world = context.size, me = context.rank;
  std::vector<char> out(kSendBufferBytes), in(kSendBufferBytes);
  const int slot = context.nextSlot();
  for (int step = 1; step < world; ++step) {  // step s: send to me+s, receive from me-s
    auto recv = context.getPair((me + world - step) % world)->createRecvBuffer(slot, in.data(), in.size());
    auto send = context.getPair((me + step) % world)->createSendBuffer(slot, out.data(), out.size());
    send->send();
    recv->waitRecv();
    send->waitSend();
  }
}

}  // namespace

GlooCommunicator::GlooCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options)
    : env_(env), options_(options) {
  server_ = StartRendezvousStore(env_);
  KvClient client = ConnectRendezvousStore(env_, server_.get(), options_.rendezvous_timeout);
  gloo::transport::tcp::attr attr;
  attr.hostname = LocalAddressToward(env_.master_addr);
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  context_ = ConnectMesh(client, "gloo/", device);
  // A second mesh whose pairs run in sync mode, for the per-step all-reduce: the calling thread
  // reads and writes its sockets itself (blocking, within the context's timeout) instead of
  // handing every message to Gloo's epoll loop thread. With one rank per core that hand-off (a
  // wake-up and two context switches per message) cost more than the bytes: 2 ranks on 2 cores
  // spent ~55 % of their time in the kernel. Gloo refuses sync pairs for its newer collectives
  // (unbound buffers: all-gather, ...), so those keep the first mesh.
  allreduce_context_ = context_;
  if (options_.sync_io && env_.world_size > 1) {
    allreduce_context_ = ConnectMesh(client, "gloo-sync/", device);
    for (int peer = 0; peer < env_.world_size; ++peer)
      if (peer != env_.rank) allreduce_context_->getPair(peer)->setSync(true, /*busyPoll=*/false);
  }
  // Everyone connected: rank 0 may now drop the store only after all ranks read from it, so keep
  // the server for the communicator's lifetime (it also serves late readers of the NCCL id).
  LogInfo("connected " + std::to_string(env_.world_size) + " ranks over Gloo TCP (" + attr.hostname + ")");
}

std::shared_ptr<gloo::Context> GlooCommunicator::ConnectMesh(KvClient& client, const std::string& prefix,
                                                            std::shared_ptr<gloo::transport::Device>& device) {
  ScopedKvStore store(client, env_.KeyScope() + prefix);
  auto context = std::make_shared<gloo::rendezvous::Context>(env_.rank, env_.world_size);
  context->setTimeout(options_.collective_timeout);
  try {
    context->connectFullMesh(store, device);
    SizeSendBuffers(*context);
  } catch (const PeerLostError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerLostError(std::string("Gloo rendezvous failed: ") + e.what());
  }
  return context;
}

GlooCommunicator::~GlooCommunicator() {
  allreduce_cache_.clear();
  allreduce_context_.reset();
  context_.reset();
}

template <typename Fn>
void GlooCommunicator::Guard(const char* what, Fn&& fn) {
  if (aborted_) throw PeerLostError(std::string(what) + ": communicator was aborted");
  try {
    fn();
  } catch (const PeerLostError&) {
    throw;
  } catch (const std::exception& e) {
    throw PeerLostError(std::string(what) + " failed (a peer died or did not answer within " +
                        std::to_string(options_.collective_timeout.count() / 1000.0) + " s): " + e.what());
  }
}

std::string GlooCommunicator::SharedMemoryName() const {
  // Unguessable without the attempt's secret, and distinct per job, attempt and all-reduce size.
  const std::string seed = env_.token + "\n" + env_.KeyScope();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(seed.data(), seed.size(), digest, &len, EVP_sha256(), nullptr) != 1) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string name = "/mltrain-";
  for (unsigned int i = 0; i < 12 && i < len; ++i) {
    name += kHex[digest[i] >> 4];
    name += kHex[digest[i] & 15];
  }
  return name;
}

uint64_t GlooCommunicator::HostWord() {
  // The kernel's boot id names the host (containers of one host share it but maybe not /dev/shm:
  // opening the segment is checked on every rank below).
  std::string id;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof(buf), f)) id = buf;
    std::fclose(f);
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  id += host;
  return std::hash<std::string>{}(id);
}

void GlooCommunicator::SetUpSharedMemory(size_t capacity) {
  shm_tried_ = true;
  std::vector<uint64_t> hosts = AllGatherWord(HostWord());
  for (uint64_t h : hosts)
    if (h != hosts[0]) return;  // ranks on several hosts: Gloo over TCP
  const std::string name = SharedMemoryName();
  std::unique_ptr<ShmAllReducer> shm;
  std::string error;
  if (env_.rank == 0) {
    try {
      shm = ShmAllReducer::Create(name, env_.world_size, capacity);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (AllGatherWord(shm || env_.rank != 0 ? 1 : 0)[0] == 1) {
    if (env_.rank != 0) {
      try {
        shm = ShmAllReducer::Open(name, env_.rank, env_.world_size, capacity);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    std::vector<uint64_t> ok = AllGatherWord(shm ? 1 : 0);
    if (env_.rank == 0) ShmAllReducer::Unlink(name);  // every rank has mapped it (or given up)
    for (uint64_t o : ok)
      if (o != 1) shm.reset();
  }
  if (!error.empty()) LogWarn("shared-memory all-reduce unavailable (" + error + "); using Gloo over TCP");
  shm_ = std::move(shm);
  if (shm_ && env_.rank == 0) LogInfo("all ranks share this host: all-reduce through shared memory");
}

bool GlooCommunicator::UseSharedMemory(size_t count) {
  // The first collective's size sets the segment's capacity (the gradient buffer in practice).
  if (options_.shm_allreduce && !shm_tried_ && env_.world_size > 1) SetUpSharedMemory(std::max<size_t>(count, 4096));
  return shm_ && count <= shm_->capacity();  // the same decision on every rank: sizes agree
}

void GlooCommunicator::AllReduceSum(std::span<float> data) {
  if (UseSharedMemory(data.size())) {
    Guard("all-reduce", [&] { shm_->AllReduceSum(data, options_.collective_timeout); });
    return;
  }
  Guard("all-reduce", [&] {
    auto key = std::make_pair(static_cast<const void*>(data.data()), data.size());
    auto it = allreduce_cache_.find(key);
    if (it == allreduce_cache_.end()) {
      std::vector<float*> ptrs{data.data()};
      std::unique_ptr<gloo::Algorithm> algo;
      if (options_.allreduce_algorithm == "ring") {
        algo = std::make_unique<gloo::AllreduceRingChunked<float>>(allreduce_context_, ptrs, static_cast<int>(data.size()));
      } else {
        algo = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(allreduce_context_, ptrs, static_cast<int>(data.size()));
      }
      it = allreduce_cache_.emplace(key, std::move(algo)).first;
    }
    it->second->run();
  });
}

void GlooCommunicator::ReduceScatterSum(std::span<float> data) {
  // Not Gloo's legacy ReduceScatterHalvingDoubling: for a world that is not a power of two its
  // smaller binary block sends with no handshake, so back-to-back calls reduce a later call's data
  // (trainer/README.md, tests/trainer/gloo_reduce_scatter_repro.cc). Instead one alltoallv moves
  // block q of every rank to rank q (each rank sends and receives (world-1)/world of the buffer,
  // half the bytes of an all-reduce), and the owner adds the world copies in rank order.
  if (data.empty()) return;
  if (UseSharedMemory(data.size())) {
    Guard("reduce-scatter", [&] { shm_->ReduceScatterSum(data, options_.collective_timeout); });
    return;
  }
  Guard("reduce-scatter", [&] {
    const int world = env_.world_size;
    const auto count = static_cast<int64_t>(data.size());
    std::vector<int64_t> send_counts(static_cast<size_t>(world));
    for (int q = 0; q < world; ++q) send_counts[static_cast<size_t>(q)] = BlockRange(count, q, world).size();
    const SampleRange mine = BlockRange(count, env_.rank, world);
    const auto block = static_cast<size_t>(mine.size());
    // One spare element: alltoallv memcpy's this rank's own (possibly empty) block, so the output
    // pointer must not be null even when this rank owns nothing.
    reduce_scatter_scratch_.resize(block * static_cast<size_t>(world) + 1);
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(data.data(), send_counts);
    opts.setOutput(reduce_scatter_scratch_.data(), std::vector<int64_t>(static_cast<size_t>(world), mine.size()));
    gloo::alltoallv(opts);
    float* out = data.data() + mine.begin;
    const float* copies = reduce_scatter_scratch_.data();
    std::copy(copies, copies + block, out);
    for (int q = 1; q < world; ++q) {
      const float* in = copies + static_cast<size_t>(q) * block;
      for (size_t i = 0; i < block; ++i) out[i] += in[i];
    }
  });
}

void GlooCommunicator::AllGather(std::span<float> data) {
  if (UseSharedMemory(data.size())) {
    Guard("all-gather", [&] { shm_->AllGather(data, options_.collective_timeout); });
    return;
  }
  Guard("all-gather", [&] {
    std::vector<size_t> counts(env_.world_size);
    for (int r = 0; r < env_.world_size; ++r) counts[r] = static_cast<size_t>(BlockRange(static_cast<int64_t>(data.size()), r, env_.world_size).size());
    SampleRange mine = BlockRange(static_cast<int64_t>(data.size()), env_.rank, env_.world_size);
    std::vector<float> input(data.begin() + mine.begin, data.begin() + mine.end);
    gloo::AllgathervOptions opts(context_);
    opts.setInput(input.data(), input.size());
    opts.setOutput(data.data(), counts);
    gloo::allgatherv(opts);
  });
}

std::vector<uint64_t> GlooCommunicator::AllGatherWord(uint64_t word) {
  std::vector<uint64_t> out(env_.world_size);
  Guard("all-gather", [&] {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(&word, 1);
    opts.setOutput(out.data(), out.size());
    gloo::allgather(opts);
  });
  return out;
}

void GlooCommunicator::Broadcast(std::span<uint8_t> bytes, int root) {
  if (bytes.empty()) return;
  Guard("broadcast", [&] {
    gloo::BroadcastOneToAll<uint8_t> algo(context_, {bytes.data()}, bytes.size(), root);
    algo.run();
  });
}

void GlooCommunicator::Barrier() {
  Guard("barrier", [&] {
    gloo::BarrierAllToAll algo(context_);
    algo.run();
  });
}

void GlooCommunicator::Abort() noexcept {
  if (aborted_) return;
  aborted_ = true;
  try {
    if (allreduce_context_ && allreduce_context_ != context_) allreduce_context_->closeConnections();
    if (context_) context_->closeConnections();
  } catch (...) {
  }
}

}  // namespace mltrain
