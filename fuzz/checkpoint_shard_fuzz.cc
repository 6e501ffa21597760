// Fuzz target: mltrain's checkpoint shard decoder (trainer/checkpoint.h: DecodeShard, then
// AssembleTensors as CheckpointManager::Load uses them). A checkpoint directory or bucket may be
// writable by others, so a shard is untrusted. Properties: no crash or UB; the only exception is
// std::runtime_error; a decoded shard re-encodes and decodes to the same tensors.
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "trainer/checkpoint.h"

namespace {

bool SameTensors(const std::vector<mltrain::ShardTensor>& a, const std::vector<mltrain::ShardTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].begin != b[i].begin || a[i].total != b[i].total ||
        a[i].values.size() != b[i].values.size() ||
        (!a[i].values.empty() && std::memcmp(a[i].values.data(), b[i].values.data(), a[i].values.size() * sizeof(float)) != 0))
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<mltrain::ShardTensor> tensors;
  try {
    tensors = mltrain::DecodeShard({data, size});
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const auto& t : tensors) {
    FUZZ_CHECK(t.begin >= 0 && t.begin <= t.total);
    FUZZ_CHECK(static_cast<int64_t>(t.values.size()) <= t.total - t.begin);
  }
  const std::vector<uint8_t> again = mltrain::EncodeShard(tensors, {});
  FUZZ_CHECK(SameTensors(mltrain::DecodeShard(again), tensors));
  if (tensors.empty()) return 0;
  try {
    auto full = mltrain::AssembleTensors(tensors, tensors.front().total);
    for (const auto& [name, values] : full) FUZZ_CHECK(static_cast<int64_t>(values.size()) == tensors.front().total);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
