// Collectives through POSIX shared memory for ranks that share a host. All-reduce: each rank copies
// its buffer into its slot, reduces its own block over all slots (in rank order, so every rank gets
// bit-identical sums), and copies the reduced buffer back (two barriers; one for small buffers,
// which every rank reduces whole). Reduce-scatter (ZeRO-1): copy in, one barrier, reduce the own
// block in place. All-gather: publish the own block, one barrier, copy the others. Barriers spin on
// per-rank counters; no system call on the fast path. Over loopback TCP the same 1 MiB
// all-reduce costs kernel copies and wake-ups on both sides; here it is a few memory passes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace mltrain {

/// One job's shared segment, mapped by every rank on the host. Create with Create()/Open(); the
/// object unmaps on destruction. Not thread-safe; every call is collective.
class ShmAllReducer {
 public:
  /// Rank 0: creates segment `name` ("/mltrain-...", unguessable: derived from the rendezvous
  /// token) with O_CREAT|O_EXCL and mode 0600, sized for `capacity` floats per rank. Throws
  /// std::runtime_error naming the call and errno.
  static std::unique_ptr<ShmAllReducer> Create(const std::string& name, int world_size, size_t capacity);
  /// Other ranks: opens the existing segment with O_NOFOLLOW and refuses it unless it is a regular
  /// object owned by this uid with mode 0600 and exactly the expected size (another user cannot
  /// plant one). Throws std::runtime_error otherwise.
  static std::unique_ptr<ShmAllReducer> Open(const std::string& name, int rank, int world_size, size_t capacity);
  /// Removes the name (rank 0, once every rank has mapped the segment); the mapping stays.
  static void Unlink(const std::string& name);
  ~ShmAllReducer();
  ShmAllReducer(const ShmAllReducer&) = delete;
  ShmAllReducer& operator=(const ShmAllReducer&) = delete;

  size_t capacity() const { return capacity_; }
  /// In place: data (at most capacity() floats, the same size on every rank) becomes the
  /// element-wise sum over ranks. Throws PeerLostError when a peer process is gone (checked every
  /// ~100 ms while waiting) or does not arrive within `timeout`.
  void AllReduceSum(std::span<float> data, std::chrono::milliseconds timeout);
  /// In place: this rank's block (BlockRange(size, rank, world)) of data becomes the sum over ranks,
  /// bit-identical to the same block of AllReduceSum; the rest of data is left as it was. Same
  /// errors as AllReduceSum.
  void ReduceScatterSum(std::span<float> data, std::chrono::milliseconds timeout);
  /// In place: every rank's block of data (BlockRange) is copied to every rank. Same errors.
  void AllGather(std::span<float> data, std::chrono::milliseconds timeout);

  /// Bytes of a segment for `world_size` ranks of `capacity` floats.
  static size_t SegmentBytes(int world_size, size_t capacity);

 private:
  struct Header;
  /// The buffer set of one call: world slots `slot` floats apart, and the shared buffer.
  struct Buffers {
    float* slots;
    size_t slot;
    float* shared;
  };
  /// All-reduces of at most this many floats are reduced whole on every rank (one barrier).
  static constexpr size_t kSmallAllReduce = 4096;
  /// Starts a call: checks count against the capacity (std::invalid_argument naming `what`) and
  /// returns this call's buffer set.
  Buffers Begin(size_t count, const char* what);
  /// out[0, n) = sum over ranks r in order of slot r [begin, begin + n).
  void SumInRankOrder(const Buffers& b, size_t begin, size_t n, float* out) const;
  ShmAllReducer(void* base, size_t bytes, int rank, int world_size, size_t capacity);
  /// Publishes `value` as this rank's counter and waits until every rank's is >= value.
  void Arrive(uint64_t value, std::chrono::steady_clock::time_point deadline);

  void* base_ = nullptr;
  size_t bytes_ = 0;
  int rank_ = 0, world_ = 1;
  size_t capacity_ = 0;
  uint64_t generation_ = 0;  // calls made
  uint64_t phase_ = 0;       // barriers passed
};

}  // namespace mltrain
