// One policy language: every policy file the project ships (policies/, its examples and
// schedd/sim/policies/) is loaded by schedd's loader and replayed by mlsim's configuration path,
// so that neither reader can drift from the files again.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "schedd/policy/policy_loader.h"
#include "schedd/sim/sim_config.h"
#include "test_util.h"

using namespace mlsched::sim;

namespace {

/// Every *.toml under `dir`, recursively, sorted.
std::vector<std::string> TomlFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".toml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every shipped policy file loads in schedd and replays in mlsim", "[sim][policy]") {
  // Three 2-processor jobs of two users on a 4-processor machine: one has to wait.
  const std::string trace = testing::WriteTemp("tiny.swf",
                                               "; MaxProcs: 4\n"
                                               "1 0 -1 100 2 -1 -1 2 200 -1 1 1 1 -1 -1 -1 -1 -1\n"
                                               "2 10 -1 100 2 -1 -1 2 200 -1 1 2 2 -1 -1 -1 -1 -1\n"
                                               "3 20 -1 50 2 -1 -1 2 100 -1 1 1 1 -1 -1 -1 -1 -1\n");
  std::vector<std::string> files = TomlFilesUnder(MLSCHED_POLICIES_DIR);
  const std::vector<std::string> sim_files = TomlFilesUnder(MLSCHED_SIM_POLICY_DIR);
  CHECK(files.size() >= 2);      // default.toml, examples/gpu-cluster.toml
  CHECK(sim_files.size() >= 4);  // the simulator's experiments
  files.insert(files.end(), sim_files.begin(), sim_files.end());
  for (const std::string& file : files) {
    INFO(file);
    const mlsched::policy::PolicyLoadResult schedd = mlsched::policy::LoadPolicyFile(file);
    INFO(schedd.ErrorText());
    CHECK(schedd.ok());

    SimConfig c;  // mlsim --trace tiny.swf --policy FILE
    c.trace_path = trace;
    c.policy_path = file;
    Replay r;
    REQUIRE_NOTHROW(r = RunReplay(c));
    CHECK(r.metrics.jobs == 3);
    CHECK(r.metrics.finished == 3);
  }
}
