#include "common/hostlist.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace mlsched {

namespace {

// One node name split into prefix and trailing number ("gpu-07" -> "gpu-", "07", 7).
struct SplitName {
  std::string prefix;
  std::string digits;  // empty when the name has no trailing number
  uint64_t number = 0;
};

SplitName Split(const std::string& name) {
  size_t end = name.size(), start = end;
  while (start > 0 && name[start - 1] >= '0' && name[start - 1] <= '9') --start;
  // Keep numbers small enough to add one to; longer digit runs are treated as part of the name.
  if (end - start > 18) start = end;
  SplitName s{name.substr(0, start), name.substr(start), 0};
  for (char c : s.digits) s.number = s.number * 10 + static_cast<uint64_t>(c - '0');
  return s;
}

// `n` printed with at least `width` digits, as ExpandHostlist pads range members.
std::string Pad(uint64_t n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Formats the names sharing one prefix (sorted by number) as "prefix[a-b,c]" or "prefixN".
std::string FormatGroup(const std::string& prefix, const std::vector<SplitName>& group) {
  std::vector<std::string> ranges;
  size_t i = 0;
  while (i < group.size()) {
    size_t j = i;
    while (j + 1 < group.size() && group[j + 1].number == group[j].number + 1 &&
           group[j + 1].digits == Pad(group[j + 1].number, group[i].digits.size()))
      ++j;
    ranges.push_back(i == j ? group[i].digits : group[i].digits + "-" + group[j].digits);
    i = j + 1;
  }
  if (group.size() == 1) return prefix + group[0].digits;
  std::string body;
  for (const auto& r : ranges) body += (body.empty() ? "" : ",") + r;
  return prefix + "[" + body + "]";
}

}  // namespace

std::string CompressHostlist(std::vector<std::string> names) {
  std::vector<SplitName> parts;
  parts.reserve(names.size());
  for (const auto& n : names) parts.push_back(Split(n));
  std::sort(parts.begin(), parts.end(), [](const SplitName& a, const SplitName& b) {
    return std::tie(a.prefix, a.number, a.digits) < std::tie(b.prefix, b.number, b.digits);
  });
  parts.erase(std::unique(parts.begin(), parts.end(),
                          [](const SplitName& a, const SplitName& b) { return a.prefix == b.prefix && a.digits == b.digits; }),
              parts.end());
  std::string out;
  size_t i = 0;
  while (i < parts.size()) {
    std::string text;
    if (parts[i].digits.empty()) {
      text = parts[i].prefix;
      ++i;
    } else {
      std::vector<SplitName> group;
      const std::string& prefix = parts[i].prefix;
      while (i < parts.size() && parts[i].prefix == prefix && !parts[i].digits.empty()) group.push_back(parts[i++]);
      text = FormatGroup(prefix, group);
    }
    out += (out.empty() ? "" : ",") + text;
  }
  return out;
}

}  // namespace mlsched
