// Fuzz target: a job's container request (common/container_ref.h), which mlsub and schedd parse
// from what users and API clients send. Properties: no crash or UB; an accepted image reference
// has a canonical form within the limits that parses back to itself; accepted mounts and
// environment names pass the single-field checks and the limits.
#include <vector>

#include "common/container_ref.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = mlsched::fuzz::Text(data, size);
  mlsched::ImageRef ref;
  if (mlsched::ParseImageRef(text, &ref).empty()) {
    const std::string canonical = ref.Canonical();
    mlsched::ImageRef again;
    FUZZ_CHECK(mlsched::ParseImageRef(canonical, &again).empty());
    FUZZ_CHECK(again.Canonical() == canonical);
    FUZZ_CHECK(ref.registry.size() + 1 + ref.repository.size() <= mlsched::kMaxImageNameBytes ||
               ref.transport != mlsched::ImageTransport::kDocker);
  }
  std::vector<mlsched::ContainerMountSpec> mounts;
  if (mlsched::ParseContainerMounts(text, &mounts).empty()) {
    FUZZ_CHECK(!mounts.empty() && mounts.size() <= mlsched::kMaxContainerMounts);
    for (const auto& m : mounts) {
      FUZZ_CHECK(mlsched::CheckContainerPath("source", m.source).empty());
      FUZZ_CHECK(mlsched::CheckContainerPath("target", m.target).empty());
      FUZZ_CHECK(mlsched::CheckMountTarget(m.target).empty());
    }
  }
  std::vector<std::string> names;
  if (mlsched::ParseContainerEnvNames(text, &names).empty()) {
    FUZZ_CHECK(!names.empty() && names.size() <= mlsched::kMaxContainerEnvNames);
    for (const auto& n : names) FUZZ_CHECK(mlsched::CheckEnvName(n).empty());
  }
  return 0;
}
