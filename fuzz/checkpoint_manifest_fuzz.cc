// Fuzz target: mltrain's checkpoint manifest (trainer/checkpoint.h: ParseManifest), read from a
// checkpoint directory or bucket that may be writable by others. Properties: no crash or UB, no
// exception; an accepted manifest has counts >= 0, an object config, and only shard keys that stay
// inside the step directory (no absolute path, no ".." component, no NUL).
#include "fuzz/fuzz_util.h"
#include "trainer/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  auto manifest = mltrain::ParseManifest({data, size}, &error);
  if (!manifest) {
    FUZZ_CHECK(!error.empty());
    return 0;
  }
  FUZZ_CHECK(manifest->step >= 0 && manifest->epoch >= 0 && manifest->sample_cursor >= 0 && manifest->parameter_count >= 0);
  FUZZ_CHECK(manifest->config.is_object());
  FUZZ_CHECK(manifest->shards.size() <= mltrain::kMaxManifestShards);
  for (const mltrain::ManifestShard& shard : manifest->shards) {
    const std::string& key = shard.key;
    FUZZ_CHECK(!key.empty() && key.size() <= mltrain::kMaxShardKeyBytes && key.front() != '/');
    FUZZ_CHECK(key.find('\0') == std::string::npos && key.find('\\') == std::string::npos);
    const std::string padded = "/" + key + "/";
    FUZZ_CHECK(padded.find("/../") == std::string::npos && padded.find("/./") == std::string::npos);
  }
  return 0;
}
