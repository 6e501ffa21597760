// Fuzz target: the scheduler policy loader (schedd/policy/policy_loader.h), TOML text to
// core::PolicySet, as schedd --policy, mladmin policy check and mlsim load it. toml++ itself is
// compiled into this target with the same instrumentation. Properties: no crash or UB, no
// exception; a result is a policy or errors, never both, and every error names the source.
#include "fuzz/fuzz_util.h"
#include "schedd/policy/policy_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = mlsched::fuzz::Text(data, size);
  mlsched::policy::PolicyLoadResult r = mlsched::policy::ParsePolicy(text, "policy.toml");
  FUZZ_CHECK(r.ok() == r.errors.empty());
  for (const auto& e : r.errors) FUZZ_CHECK(e.file == "policy.toml");
  return 0;
}
