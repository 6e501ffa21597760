// Fuzz target: job dependency and job array expressions (schedd/core/dependency.h), parsed by
// mlsub and again by schedd from a client's JobSpec. Properties: no crash or UB; array element
// ids are sorted, unique, within [0, kMaxArrayTaskId] and at most max_elements; job ids are > 0.
#include "fuzz/fuzz_util.h"
#include "schedd/core/dependency.h"

namespace core = mlsched::core;

namespace {

void CheckArray(const std::string& text, int32_t max_elements) {
  core::ArrayRequest array;
  if (core::ParseArray(text, max_elements, &array)) return;
  FUZZ_CHECK(!array.task_ids.empty());
  FUZZ_CHECK(array.task_ids.size() <= static_cast<size_t>(max_elements));
  FUZZ_CHECK(array.max_running >= 0);
  for (size_t i = 0; i < array.task_ids.size(); ++i) {
    FUZZ_CHECK(array.task_ids[i] >= 0 && array.task_ids[i] <= core::kMaxArrayTaskId);
    FUZZ_CHECK(i == 0 || array.task_ids[i - 1] < array.task_ids[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = mlsched::fuzz::Text(data, size);
  core::DependencyRequest dep;
  if (!core::ParseDependency(text, &dep)) {
    FUZZ_CHECK(!dep.terms.empty());
    for (const core::DependencyTerm& term : dep.terms) {
      FUZZ_CHECK(term.type == core::DependencyType::kSingleton ? term.jobs.empty() : !term.jobs.empty());
      for (const core::JobRef& ref : term.jobs) FUZZ_CHECK(ref.job > 0);
    }
  }
  if (auto ref = core::ParseJobRef(text)) FUZZ_CHECK(ref->job > 0);
  // mlsub passes kMaxArrayTaskId + 1; smaller limits keep each run fast (an accepted 0-999999 builds
  // a million-element set, a linear cost the fuzzer need not pay) while still exercising the check.
  CheckArray(text, 5000);
  CheckArray(text, 100);
  return 0;
}
