// Deterministic data order: depends only on the seed, the epoch and the global sample index.
#pragma once

#include <cstdint>
#include <vector>

namespace mltrain {

/// SplitMix64 (Steele, Lea, Flood 2014; the seeding generator of xoshiro): a small, portable
/// pseudo-random stream, identical on every platform and standard library.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform double in [0, 1) from the top 53 bits.
  double NextUnit() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  /// Integer in [0, bound) by Lemire's multiply-shift (bias < bound / 2^64, negligible here).
  uint64_t NextBelow(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * bound) >> 64);
  }
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

/// The order in which epoch `epoch` visits the n training samples: a Fisher-Yates shuffle driven
/// by SplitMix64(seed mixed with epoch). The same on every rank and for every world size.
std::vector<uint32_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n);

/// Half-open range [begin, end) of positions inside one global batch.
struct SampleRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

/// The disjoint, contiguous slice of a global batch of `global_batch` samples that `rank` of
/// `world_size` processes; the slices of all ranks cover the batch exactly (sizes differ by <= 1).
SampleRange RankSlice(int64_t global_batch, int rank, int world_size);

/// Block partition of `count` elements over `parts` (the first count % parts blocks get one more):
/// used for checkpoint shards and ZeRO-style state shards.
SampleRange BlockRange(int64_t count, int part, int parts);

}  // namespace mltrain
