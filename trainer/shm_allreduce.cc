#include "trainer/shm_allreduce.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {

namespace {
constexpr uint64_t kMagic = 0x6d6c7472'61696e31ULL;  // "mltrain1"
constexpr int kMaxRanks = 256;
constexpr size_t kAlign = 64;

std::runtime_error SysError(const std::string& what, const std::string& name) {
  return std::runtime_error(what + " " + name + ": " + std::strerror(errno));
}
}  // namespace

/// Segment layout: this header, then two buffer sets (call g uses set g % 2), each world_size slots
/// of `capacity` floats (one per rank's input) and one shared buffer of `capacity` floats (reduced
/// blocks, gathered blocks). Counters sit on their own cache lines.
///
/// Why two sets: every call passes at least one barrier, and a rank arrives at call g's first
/// barrier only after its reads of call g-1 are done; so when a rank writes set g % 2 in call g, all
/// reads of call g-2 (the last user of that set) are over. One barrier per reduce-scatter,
/// all-gather and small all-reduce, instead of a second one to protect the buffers.
struct ShmAllReducer::Header {
  uint64_t magic;
  uint64_t world_size;
  uint64_t capacity;
  struct alignas(kAlign) Rank {
    std::atomic<uint64_t> arrived;  // barriers passed (the same sequence on every rank)
    std::atomic<int64_t> pid;
  } ranks[kMaxRanks];
};

size_t ShmAllReducer::SegmentBytes(int world_size, size_t capacity) {
  size_t slot = (capacity * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  return sizeof(Header) + 2 * slot * (static_cast<size_t>(world_size) + 1);
}

ShmAllReducer::ShmAllReducer(void* base, size_t bytes, int rank, int world_size, size_t capacity)
    : base_(base), bytes_(bytes), rank_(rank), world_(world_size), capacity_(capacity) {}

ShmAllReducer::~ShmAllReducer() {
  if (base_) ::munmap(base_, bytes_);
}

std::unique_ptr<ShmAllReducer> ShmAllReducer::Create(const std::string& name, int world_size, size_t capacity) {
  if (world_size < 1 || world_size > kMaxRanks) throw std::runtime_error("shared-memory all-reduce: bad world size");
  const size_t bytes = SegmentBytes(world_size, capacity);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw SysError("cannot create shared memory", name);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw SysError("cannot size shared memory", name);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    throw SysError("cannot map shared memory", name);
  }
  auto* h = new (base) Header{};
  h->world_size = static_cast<uint64_t>(world_size);
  h->capacity = capacity;
  h->ranks[0].pid.store(::getpid());
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kMagic;
  return std::unique_ptr<ShmAllReducer>(new ShmAllReducer(base, bytes, 0, world_size, capacity));
}

std::unique_ptr<ShmAllReducer> ShmAllReducer::Open(const std::string& name, int rank, int world_size, size_t capacity) {
  if (rank < 1 || rank >= world_size || world_size > kMaxRanks) throw std::runtime_error("shared-memory all-reduce: bad rank");
  const size_t bytes = SegmentBytes(world_size, capacity);
  int fd = ::shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) throw SysError("cannot open shared memory", name);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 0777) != 0600 ||
      static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    throw std::runtime_error("refusing shared memory " + name + ": not a 0600 object of this user with the expected size");
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw SysError("cannot map shared memory", name);
  auto* h = static_cast<Header*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kMagic || h->world_size != static_cast<uint64_t>(world_size) || h->capacity != capacity) {
    ::munmap(base, bytes);
    throw std::runtime_error("shared memory " + name + " has another layout");
  }
  h->ranks[rank].pid.store(::getpid());
  return std::unique_ptr<ShmAllReducer>(new ShmAllReducer(base, bytes, rank, world_size, capacity));
}

void ShmAllReducer::Unlink(const std::string& name) { ::shm_unlink(name.c_str()); }

void ShmAllReducer::Arrive(uint64_t value, std::chrono::steady_clock::time_point deadline) {
  auto* h = static_cast<Header*>(base_);
  h->ranks[rank_].arrived.store(value, std::memory_order_release);
  auto next_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (int r = 0; r < world_; ++r) {
    for (uint64_t spins = 0; h->ranks[r].arrived.load(std::memory_order_acquire) < value; ++spins) {
      if (spins < 2000) continue;  // the peer is usually microseconds away
      std::this_thread::yield();   // one rank per core: give the core to whoever runs late
      if ((spins & 63) != 0) continue;
      auto now = std::chrono::steady_clock::now();
      if (now < next_check) continue;
      next_check = now + std::chrono::milliseconds(100);
      const int64_t pid = h->ranks[r].pid.load();
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        throw PeerLostError("shared-memory all-reduce: rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") exited");
      if (now > deadline)
        throw PeerLostError("shared-memory all-reduce: rank " + std::to_string(r) + " did not arrive in time");
    }
  }
}

ShmAllReducer::Buffers ShmAllReducer::Begin(size_t count, const char* what) {
  if (count > capacity_) throw std::invalid_argument(std::string("shared-memory ") + what + ": buffer larger than the segment");
  const size_t slot = (capacity_ * sizeof(float) + kAlign - 1) / kAlign * kAlign / sizeof(float);
  float* set = reinterpret_cast<float*>(static_cast<char*>(base_) + sizeof(Header)) +
               (generation_++ % 2) * slot * (static_cast<size_t>(world_) + 1);
  return {set, slot, set + slot * static_cast<size_t>(world_)};
}

void ShmAllReducer::SumInRankOrder(const Buffers& b, size_t begin, size_t n, float* out) const {
  // out = slot 0 + slot 1 + ... in rank order for every element: every rank computes any element
  // the same way, so all paths (all-reduce, reduce-scatter) give bit-identical sums.
  std::memcpy(out, b.slots + begin, n * sizeof(float));
  for (int r = 1; r < world_; ++r) {
    const float* in = b.slots + b.slot * static_cast<size_t>(r) + begin;
    for (size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

void ShmAllReducer::AllReduceSum(std::span<float> data, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const Buffers b = Begin(data.size(), "all-reduce");
  std::memcpy(b.slots + b.slot * static_cast<size_t>(rank_), data.data(), data.size_bytes());
  Arrive(++phase_, deadline);  // every input is in place
  if (data.size() <= kSmallAllReduce) {  // reducing it all on every rank is cheaper than a barrier
    SumInRankOrder(b, 0, data.size(), data.data());
    return;
  }
  const SampleRange mine = BlockRange(static_cast<int64_t>(data.size()), rank_, world_);
  SumInRankOrder(b, static_cast<size_t>(mine.begin), static_cast<size_t>(mine.size()), b.shared + mine.begin);
  Arrive(++phase_, deadline);  // every block is reduced
  std::memcpy(data.data(), b.shared, data.size_bytes());
}

void ShmAllReducer::ReduceScatterSum(std::span<float> data, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const Buffers b = Begin(data.size(), "reduce-scatter");
  std::memcpy(b.slots + b.slot * static_cast<size_t>(rank_), data.data(), data.size_bytes());
  Arrive(++phase_, deadline);
  const SampleRange mine = BlockRange(static_cast<int64_t>(data.size()), rank_, world_);
  SumInRankOrder(b, static_cast<size_t>(mine.begin), static_cast<size_t>(mine.size()), data.data() + mine.begin);
}

void ShmAllReducer::AllGather(std::span<float> data, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const Buffers b = Begin(data.size(), "all-gather");
  const SampleRange mine = BlockRange(static_cast<int64_t>(data.size()), rank_, world_);
  std::memcpy(b.shared + mine.begin, data.data() + mine.begin, static_cast<size_t>(mine.size()) * sizeof(float));
  Arrive(++phase_, deadline);
  std::memcpy(data.data(), b.shared, static_cast<size_t>(mine.begin) * sizeof(float));
  std::memcpy(data.data() + mine.end, b.shared + mine.end, (data.size() - static_cast<size_t>(mine.end)) * sizeof(float));
}

}  // namespace mltrain
