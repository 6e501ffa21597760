// Fuzz target: the quantities users type (common/units.h: memory sizes, CPU counts, time limits,
// as in mlsub options and #MLSUB directives; points in time, as in mlq --since) and the policy
// file's durations (schedd/policy/policy_loader.h). Properties: no crash or UB; parsed values are
// never negative; a point in time given as an age is never after now.
#include "common/units.h"
#include "fuzz/fuzz_util.h"
#include "schedd/policy/policy_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = mlsched::fuzz::Text(data, size);
  if (auto m = mlsched::ParseMemory(text)) {
    FUZZ_CHECK(*m.value >= 0);
    (void)mlsched::FormatBytes(*m.value);
  }
  if (auto c = mlsched::ParseCpus(text)) FUZZ_CHECK(*c.value >= 0);
  if (auto d = mlsched::ParseDuration(text)) {
    FUZZ_CHECK(*d.value >= 0);
    (void)mlsched::FormatDuration(*d.value);
  }
  if (auto d = mlsched::policy::ParseDuration(text)) FUZZ_CHECK(*d >= 0);
  const int64_t now = 1'800'000'000;
  if (auto t = mlsched::ParseTimePoint(text, now)) {
    FUZZ_CHECK(*t.value >= 0 || text.starts_with("-") || text.starts_with("now-"));
    if (text.starts_with("-") || text.starts_with("now-")) FUZZ_CHECK(*t.value < now);
  }
  return 0;
}
