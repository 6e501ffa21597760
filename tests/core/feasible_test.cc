#include <catch2/catch.hpp>

#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

TEST_CASE("CheckJobFeasible explains why a spec can never run", "[core][feasible]") {
  auto nodes = ClusterBuilder()
                   .Domain("nvl-a").Nodes("gpu-[01-02]").Gpus("h100", 8)
                   .Domain("nvl-b").Nodes("gpu-[03-04]").Gpus("h100", 8)
                   .Build();
  nodes[0].health = NodeHealth::kDown;  // health does not matter for feasibility
  PolicySet policy;
  struct Row { const char* what; JobSpec spec; std::optional<std::string> error; };
  std::vector<Row> table{
      {"fits", JobBuilder().Tasks(4).GpusPerTask(8).Build().spec, std::nullopt},
      {"too many GPUs per task", JobBuilder().GpusPerTask(9).Build().spec,
       "job needs 9 GPUs per task but no node has more than 8"},
      {"too many tasks", JobBuilder().Tasks(5).GpusPerTask(8).Build().spec,
       "job needs 5 tasks but partition 'default' can hold at most 4 at once"},
      {"same domain too big", JobBuilder().Tasks(3).GpusPerTask(8).Topo(Topology::kSameDomain).Build().spec,
       "job needs 3 tasks with topology same-domain but no group of nodes in partition 'default' "
       "satisfying it can hold them"},
      {"wrong GPU type", JobBuilder().GpusPerTask(1, "a100").Build().spec,
       "no node in partition 'default' has an acceptable GPU type"},
      {"unknown partition", JobBuilder().Partition("gpu").Build().spec, "unknown partition 'gpu'"},
      {"time limit", JobBuilder().TimeLimit(8 * 24h).Build().spec,
       "time limit 691200 s exceeds partition 'default' maximum of 604800 s"},
      {"cpu per task", JobBuilder().CpusPerTask(65).Build().spec,
       "job needs 65000 CPU millicores per task but no node has more than 64000"},
  };
  for (const Row& row : table) {
    SECTION(row.what) { CHECK(CheckJobFeasible(nodes, policy, row.spec).value_or("ok") == row.error.value_or("ok")); }
  }
}
