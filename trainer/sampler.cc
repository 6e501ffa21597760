#include "trainer/sampler.h"

#include <numeric>
#include <stdexcept>

namespace mltrain {

std::vector<uint32_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t n) {
  if (n < 0 || n > static_cast<int64_t>(UINT32_MAX)) throw std::invalid_argument("EpochPermutation: bad sample count");
  std::vector<uint32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0u);
  SplitMix64 mix(seed);
  SplitMix64 rng(mix.Next() ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull));
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t j = rng.NextBelow(static_cast<uint64_t>(i) + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

SampleRange BlockRange(int64_t count, int part, int parts) {
  if (parts <= 0 || part < 0 || part >= parts) throw std::invalid_argument("BlockRange: part out of range");
  int64_t base = count / parts, extra = count % parts;
  int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

SampleRange RankSlice(int64_t global_batch, int rank, int world_size) {
  return BlockRange(global_batch, rank, world_size);
}

}  // namespace mltrain
