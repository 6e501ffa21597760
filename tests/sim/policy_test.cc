// The simulator's policy and cluster files: keys map onto core::PolicySet / the fleet; bad keys
// and values are named in the error.
#include <catch2/catch.hpp>

#include "schedd/sim/fleet.h"
#include "schedd/sim/policy_file.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::WriteTemp;
namespace core = mlsched::core;

TEST_CASE("a policy file fills queue order, backfill, weights, fairshare and accounts",
          "[sim][policy]") {
  const std::string path = WriteTemp("p.toml",
                                     "queue_order = \"multifactor\"\n"
                                     "default_partition = \"batch\"\n"
                                     "[backfill]\nmode = \"conservative\"\norder = \"shortest-first\"\n"
                                     "depth = 50\nwindow_s = 86400\n"
                                     "[weights]\nage = 1000\nfairshare = 300\nmax_age_s = 172800\n"
                                     "[fairshare]\nalgorithm = \"fair-tree\"\nhalf_life_s = 3600\n"
                                     "billing = { cpu = 1.0, gpu = 10.0 }\n"
                                     "[[accounts]]\nname = \"g1\"\nshares = 3\n"
                                     "users = { u1 = 2 }\n"
                                     "[[accounts]]\nname = \"g2\"\n"
                                     "[[partitions]]\nname = \"batch\"\nmax_time_limit_s = 7200\n");
  std::map<std::string, double> shares;
  core::PolicySet p = ReadPolicyFile(path, &shares);
  CHECK(p.queue_order == core::QueueOrder::kMultifactor);
  CHECK(p.backfill.mode == core::BackfillMode::kConservative);
  CHECK(p.backfill.order == core::BackfillOrder::kShortestFirst);
  CHECK(p.backfill.depth == 50);
  CHECK(p.backfill.window == 86400);
  CHECK(p.weights.age == 1000);
  CHECK(p.weights.fairshare == 300);
  CHECK(p.weights.max_age == 172800);
  CHECK(p.fairshare.algorithm == core::FairshareAlgorithm::kFairTree);
  CHECK(p.fairshare.billing_weights.at("gpu") == 10.0);
  REQUIRE(p.accounts.size() == 2);
  CHECK(p.accounts[0].user_shares.at("u1") == 2);
  CHECK(shares == std::map<std::string, double>{{"g1", 3}, {"g2", 1}});
  REQUIRE(p.partitions.size() == 1);
  CHECK(p.partitions[0].max_time_limit == 7200);
  CHECK(p.default_partition == "batch");
  CHECK(DescribeSchedulingPolicy(p) == "multifactor+conservative(shortest-first)");
  CHECK_FALSE(p.backfill.keep_plans);
}

TEST_CASE("backfill keep_plans is read from the policy file", "[sim][policy]") {
  const std::string path =
      WriteTemp("k.toml", "[backfill]\nmode = \"conservative\"\nkeep_plans = true\n");
  core::PolicySet p = ReadPolicyFile(path, nullptr);
  CHECK(p.backfill.keep_plans);
  CHECK(DescribeSchedulingPolicy(p) == "fifo+conservative(keep-plans)");
  CHECK_THROWS_WITH(ReadPolicyFile(WriteTemp("k2.toml", "[backfill]\nkeep_plans = 1\n"), nullptr),
                    Catch::Contains("keep_plans"));
}

TEST_CASE("policy errors name the file and the key", "[sim][policy]") {
  CHECK_THROWS_WITH(ReadPolicyFile(WriteTemp("u.toml", "backfil = \"easy\"\n"), nullptr),
                    Catch::Contains("u.toml") && Catch::Contains("unknown key 'backfil'"));
  CHECK_THROWS_WITH(ReadPolicyFile(WriteTemp("w.toml", "[weights]\nage = -1\n"), nullptr),
                    Catch::Contains("weights") && Catch::Contains("age"));
  CHECK_THROWS_WITH(ReadPolicyFile(WriteTemp("b.toml", "backfill = \"greedy\"\n"), nullptr),
                    Catch::Contains("unknown backfill mode 'greedy'"));
  CHECK_THROWS_WITH(ReadPolicyFile(WriteTemp("s.toml", "x = [\n"), nullptr),
                    Catch::Contains("s.toml:"));
}

TEST_CASE("backfill mode and order overrides apply to the policy", "[sim][policy]") {
  core::PolicySet p;
  SetBackfillMode(p, "easy");
  SetBackfillOrder(p, "shortest-first");
  CHECK(DescribeSchedulingPolicy(p) == "fifo+easy(shortest-first)");
  CHECK_THROWS_AS(SetBackfillOrder(p, "longest"), std::invalid_argument);
}

TEST_CASE("a cluster file builds node groups with pools, domains and eviction rates",
          "[sim][fleet]") {
  Fleet f = ReadClusterFile(WriteTemp("c.toml",
                                      "[[nodes]]\nprefix = \"gpu\"\ncount = 4\ncpus = 32\n"
                                      "memory_gib = 256\ngpus = 8\ngpu_type = \"h100\"\n"
                                      "domain_size = 2\n"
                                      "[[nodes]]\nprefix = \"spot\"\ncount = 2\ngpus = 4\n"
                                      "pool = \"spot\"\neviction_rate_per_hour = 0.5\n"));
  REQUIRE(f.nodes.size() == 6);
  CHECK(f.nodes[0].name == "gpu-000");
  CHECK(f.nodes[0].capacity.gpus.at("h100") == 8);
  CHECK(f.nodes[1].domain == "gpu-d0");
  CHECK(f.nodes[2].domain == "gpu-d1");
  CHECK(f.nodes[4].pool == core::Pool::kSpot);
  CHECK(f.eviction_rate_per_hour[4] == 0.5);
  CHECK(f.eviction_rate_per_hour[0] == 0.0);
  CHECK(TotalGpus(f) == 40);
  CHECK_THROWS_WITH(ReadClusterFile(WriteTemp("bad.toml", "[[nodes]]\ncount = 0\n")),
                    Catch::Contains("#1") && Catch::Contains("count"));
  CHECK_THROWS_WITH(
      ReadClusterFile(WriteTemp("bad2.toml", "[[nodes]]\ncount = 1\neviction_rate_per_hour = 1.0\n")),
      Catch::Contains("only set on spot nodes"));
}
