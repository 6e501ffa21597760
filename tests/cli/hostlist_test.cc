#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>

#include "common/hostlist.h"
#include "common/units.h"

using mlsched::ExpandHostlist;
using mlsched::CompressHostlist;

namespace {

// Expands a compressed list (comma-separated groups, at most one bracket per group) to a set.
std::set<std::string> ExpandAll(const std::string& list) {
  std::set<std::string> out;
  std::string group;
  int depth = 0;
  auto flush = [&] {
    auto names = ExpandHostlist(group);
    REQUIRE(names);
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

}  // namespace

TEST_CASE("consecutive zero-padded nodes compress into one range", "[cli][hostlist]") {
  CHECK(CompressHostlist({"gpu-01", "gpu-02", "gpu-03"}) == "gpu-[01-03]");
  CHECK(CompressHostlist({"gpu-07", "gpu-01", "gpu-03", "gpu-02"}) == "gpu-[01-03,07]");
  CHECK(CompressHostlist({"gpu-01", "gpu-03", "gpu-05"}) == "gpu-[01,03,05]");
}

TEST_CASE("a single node, duplicates and empty input", "[cli][hostlist]") {
  CHECK(CompressHostlist({"gpu-01"}) == "gpu-01");
  CHECK(CompressHostlist({"a1", "a1", "a1"}) == "a1");
  CHECK(CompressHostlist({}).empty());
}

TEST_CASE("numbers are ordered numerically and padding is kept apart", "[cli][hostlist]") {
  CHECK(CompressHostlist({"n10", "n9", "n8"}) == "n[8-10]");
  CHECK(CompressHostlist({"n099", "n100", "n101"}) == "n[099-101]");
  // "n1" and "n01" are different hosts: never merged into one range.
  CHECK(CompressHostlist({"n1", "n01", "n2"}) == "n[01,1-2]");
  CHECK(ExpandAll("n[01,1-2]") == std::set<std::string>{"n01", "n1", "n2"});
}

TEST_CASE("different prefixes and names without numbers become separate groups", "[cli][hostlist]") {
  CHECK(CompressHostlist({"b2", "a1", "b1", "head"}) == "a1,b[1-2],head");
  CHECK(CompressHostlist({"head", "login", "head"}) == "head,login");
  CHECK(CompressHostlist({"rack1-gpu1", "rack1-gpu2", "rack2-gpu1"}) == "rack1-gpu[1-2],rack2-gpu1");
}

TEST_CASE("compression is the inverse of ExpandHostlist", "[cli][hostlist]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::set<std::string> names;
    int n = 1 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      int num = static_cast<int>(rng() % 40);
      std::string digits = std::to_string(num);
      if (rng() % 2 && digits.size() < 3) digits = std::string(3 - digits.size(), '0') + digits;
      names.insert((rng() % 3 ? "gpu-" : "cpu") + digits);
    }
    std::string compressed = CompressHostlist({names.begin(), names.end()});
    INFO(compressed);
    CHECK(ExpandAll(compressed) == names);
  }
}

// Found by fuzz/hostlist_fuzz.cc (out of memory under libFuzzer's 2 GB limit): 3 KB of
// "n[0-99999,0-99999,...]" asked for 40 million names. The whole list is now capped.
TEST_CASE("a hostlist expanding to too many names is an error", "[cli][hostlist][fuzz]") {
  std::string big = "n[";
  for (int i = 0; i < 400; ++i) big += (i ? "," : "") + std::string("0-99999");
  auto r = ExpandHostlist(big + "]");
  CHECK_FALSE(r);
  CHECK_THAT(r.error, Catch::Contains("more than 1000000 names"));
  std::string exact = "n[";
  for (int i = 0; i < 10; ++i) exact += (i ? "," : "") + std::string("0-99999");
  CHECK(ExpandHostlist(exact + "]").value->size() == mlsched::kMaxHostlistNames);
  CHECK_FALSE(ExpandHostlist(exact + ",7]"));
  CHECK(ExpandHostlist("n[0-100000]").value->size() == 100001);
  CHECK_FALSE(ExpandHostlist("n[0-100001]"));
}

// Found by the hostlist fuzz target (out of memory after 184,000 runs): the names themselves were
// unbounded, so a 3 KB prefix times 100,000 names asked for 300 MB.
TEST_CASE("a hostlist expanding to too many bytes of names is an error", "[cli][hostlist][fuzz]") {
  auto r = ExpandHostlist(std::string(3000, 'a') + "[0-99999]");
  CHECK_FALSE(r);
  CHECK_THAT(r.error, Catch::Contains("more than 16 MiB of names"));
  CHECK(ExpandHostlist(std::string(100, 'a') + "[0-99999]").value->size() == 100000);
}
