// mladmin policy check: the policy file loaded as schedd loads it, errors as FILE:LINE:COL.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli/policy_check.h"

using namespace mlsched;
using namespace mlsched::cli;
namespace fs = std::filesystem;

namespace {

fs::path Write(const std::string& name, const std::string& text) {
  static const fs::path dir = fs::temp_directory_path() / ("mlsched-policy-check-" + std::to_string(std::random_device()()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

}  // namespace

TEST_CASE("policy check accepts the shipped policies with a one-line summary", "[cli][policy]") {
  auto r = CheckPolicyFile(MLSCHED_SOURCE_DIR "/policies/default.toml");
  INFO((r.errors.empty() ? std::string() : r.errors.front()));
  REQUIRE(r.ok);
  CHECK(r.errors.empty());
  CHECK(r.summary == "1 partition (default), 1 QoS (normal), 0 accounts, queue multifactor, backfill easy");
  auto g = CheckPolicyFile(MLSCHED_SOURCE_DIR "/policies/examples/gpu-cluster.toml");
  INFO((g.errors.empty() ? std::string() : g.errors.front()));
  CHECK(g.ok);
}

TEST_CASE("policy check accepts the simulator's policies as schedd would", "[cli][policy]") {
  // mlsim reads schedd's policy files (schedd/sim/README.md), so its experiments are valid policies.
  int checked = 0;
  for (const auto& e : fs::directory_iterator(MLSCHED_SOURCE_DIR "/schedd/sim/policies")) {
    if (e.path().extension() != ".toml") continue;
    auto r = CheckPolicyFile(e.path().string());
    INFO(e.path().string() << ": " << (r.errors.empty() ? std::string() : r.errors.front()));
    CHECK(r.ok);
    ++checked;
  }
  CHECK(checked >= 4);
}

TEST_CASE("policy check of an empty file is the built-in default", "[cli][policy]") {
  auto r = CheckPolicyFile(Write("empty.toml", "").string());
  REQUIRE(r.ok);
  CHECK(r.summary == "1 partition (default), 0 QoS, 0 accounts, queue fifo, backfill none");
}

TEST_CASE("policy check reports every error as FILE:LINE:COL", "[cli][policy]") {
  fs::path p = Write("bad.toml", "[backfill]\nmode = \"sometimes\"\n\n[scheduler]\nqueue_ordr = \"fifo\"\n");
  auto r = CheckPolicyFile(p.string());
  CHECK_FALSE(r.ok);
  CHECK(r.summary.empty());
  REQUIRE(r.errors.size() >= 2);
  bool line2 = false, line5 = false;
  for (const auto& e : r.errors) {
    line2 |= e.rfind(p.string() + ":2:", 0) == 0 && e.find("sometimes") != std::string::npos;
    line5 |= e.rfind(p.string() + ":5:1: unknown key 'queue_ordr'", 0) == 0;
  }
  CHECK(line2);
  CHECK(line5);
}

TEST_CASE("policy check reads the pricing tables like schedd", "[cli][policy]") {
  fs::path p = Write("price.toml", "[pricing.on-demand]\ncpu_hour = -1.0\n");
  auto r = CheckPolicyFile(p.string());
  CHECK_FALSE(r.ok);
  REQUIRE(r.errors.size() == 1);
  CHECK_THAT(r.errors[0], Catch::StartsWith(p.string() + ":2:") && Catch::Contains("'cpu_hour' in [pricing.on-demand]: must be >= 0"));
}

TEST_CASE("policy check of a missing file is one error", "[cli][policy]") {
  auto r = CheckPolicyFile("/nonexistent/policy.toml");
  CHECK_FALSE(r.ok);
  REQUIRE(r.errors.size() == 1);
  CHECK_THAT(r.errors[0], Catch::StartsWith("/nonexistent/policy.toml:"));
}
