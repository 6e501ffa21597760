// Fuzz target: Slurm hostlists. ExpandHostlist (common/units.h) parses what users and admins type
// (mladmin, partition node lists); CompressHostlist (common/hostlist.h) must be its exact inverse.
// Properties: no crash or UB; for node names of [a-z0-9.-], expanding the compressed list gives
// back exactly the input set.
#include <set>
#include <vector>

#include "common/hostlist.h"
#include "common/units.h"
#include "fuzz/fuzz_util.h"

namespace {

// Expands a compressed list (comma-separated groups, at most one bracket per group) to a set.
std::set<std::string> ExpandAll(const std::string& list) {
  std::set<std::string> out;
  std::string group;
  int depth = 0;
  auto flush = [&] {
    auto names = mlsched::ExpandHostlist(group);
    FUZZ_CHECK(names);
    out.insert(names.value->begin(), names.value->end());
    group.clear();
  };
  for (char c : list) {
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    group += c;
  }
  if (!group.empty()) flush();
  return out;
}

bool PlainName(const std::string& name) {
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  return !name.empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = mlsched::fuzz::Text(data, size);
  (void)mlsched::ExpandHostlist(text);
  // Round trip: the input's lines are node names.
  std::vector<std::string> names;
  std::set<std::string> want;
  size_t start = 0;
  while (start <= text.size() && names.size() < 512) {
    size_t nl = text.find('\n', start);
    std::string name = text.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!PlainName(name)) return 0;
    names.push_back(name);
    want.insert(name);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  const std::string compressed = mlsched::CompressHostlist(names);
  FUZZ_CHECK(ExpandAll(compressed) == want);
  return 0;
}
