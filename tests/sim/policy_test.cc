// The simulator reads policy files with schedd's loader (schedd's schema, FILE:LINE:COL errors),
// applies its command-line overrides and [simulation] settings; and its cluster files.
#include <catch2/catch.hpp>

#include "schedd/policy/policy_loader.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/sim_config.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::WriteTemp;
namespace core = mlsched::core;
namespace policy = mlsched::policy;

namespace {

/// What ReadPolicy threw for `text` (written to `name`), or "" when it loaded.
std::string PolicyError(const std::string& name, const std::string& text) {
  try {
    ReadPolicy(WriteTemp(name, text));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a policy file fills queue order and backfill and weights and fairshare and accounts",
          "[sim][policy]") {
  const std::string path = WriteTemp("p.toml",
                                     "default_partition = \"batch\"\n"
                                     "[scheduler]\nqueue_order = \"multifactor\"\n"
                                     "[backfill]\nmode = \"conservative\"\norder = \"shortest-first\"\n"
                                     "depth = 50\nwindow = \"1d\"\n"
                                     "[priority]\nweight_age = 1000\nweight_fairshare = 300\nmax_age = 172800\n"
                                     "[fairshare]\nalgorithm = \"fair-tree\"\nhalf_life = \"1h\"\n"
                                     "billing_weights = { cpu = 1.0, gpu = 10.0 }\n"
                                     "[[accounts]]\nname = \"g1\"\nshares = 3\n"
                                     "users = { u1 = 2 }\n"
                                     "[[accounts]]\nname = \"g2\"\n"
                                     "[[partitions]]\nname = \"batch\"\nmax_time_limit = \"2h\"\n");
  const core::PolicySet p = *ReadPolicy(path).policy;
  CHECK(p.queue_order == core::QueueOrder::kMultifactor);
  CHECK(p.backfill.mode == core::BackfillMode::kConservative);
  CHECK(p.backfill.order == core::BackfillOrder::kShortestFirst);
  CHECK(p.backfill.depth == 50);
  CHECK(p.backfill.window == 86400);
  CHECK(p.weights.age == 1000);
  CHECK(p.weights.fairshare == 300);
  CHECK(p.weights.max_age == 172800);
  CHECK(p.fairshare.algorithm == core::FairshareAlgorithm::kFairTree);
  CHECK(p.fairshare.half_life == 3600);
  CHECK(p.fairshare.billing_weights.at("gpu") == 10.0);
  REQUIRE(p.accounts.size() == 2);
  CHECK(p.accounts[0].user_shares.at("u1") == 2);
  CHECK(AccountShares(p) == std::map<std::string, double>{{"g1", 3}, {"g2", 1}});
  REQUIRE(p.partitions.size() == 1);
  CHECK(p.partitions[0].max_time_limit == 7200);
  CHECK(p.default_partition == "batch");
  CHECK(DescribeSchedulingPolicy(p) == "multifactor+conservative(shortest-first)");
  CHECK_FALSE(p.backfill.keep_plans);
  // No file: the core's defaults, as for schedd without --policy.
  CHECK(DescribeSchedulingPolicy(*ReadPolicy("").policy) == "fifo");
}

TEST_CASE("backfill keep_plans is read from the policy file", "[sim][policy]") {
  const std::string path =
      WriteTemp("k.toml", "[backfill]\nmode = \"conservative\"\nkeep_plans = true\n");
  core::PolicySet p = *ReadPolicy(path).policy;
  CHECK(p.backfill.keep_plans);
  CHECK(DescribeSchedulingPolicy(p) == "fifo+conservative(keep-plans)");
  CHECK_THAT(PolicyError("k2.toml", "[backfill]\nkeep_plans = 1\n"),
             Catch::Contains("k2.toml:2:") && Catch::Contains("keep_plans"));
}

TEST_CASE("policy errors are schedd's: FILE:LINE:COL and every one of them", "[sim][policy]") {
  CHECK_THAT(PolicyError("u.toml", "backfil = \"easy\"\n"),
             Catch::Contains("u.toml:1:1: unknown key 'backfil'"));
  CHECK_THAT(PolicyError("w.toml", "[priority]\nweight_age = -1\n"),
             Catch::Contains("w.toml:2:") && Catch::Contains("weight_age"));
  CHECK_THAT(PolicyError("b.toml", "[backfill]\nmode = \"greedy\"\n"),
             Catch::Contains("b.toml:2:") && Catch::Contains("greedy"));
  CHECK_THAT(PolicyError("s.toml", "x = [\n"), Catch::StartsWith(WriteTemp("s.toml", "x = [\n") + ":"));
  // The simulator's former keys are unknown: one schema for schedd and mlsim.
  const std::string old = PolicyError("old.toml", "queue_order = \"fifo\"\n[weights]\nage = 1\n");
  CHECK_THAT(old, Catch::Contains("old.toml:1:1: unknown key 'queue_order'") &&
                      Catch::Contains("old.toml:2:") && Catch::Contains("'weights'"));
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

TEST_CASE("[simulation] settings fill what the command line leaves unset", "[sim][policy]") {
  const policy::PolicyLoadResult file = ReadPolicy(WriteTemp("sim.toml",
                                                             "[simulation]\n"
                                                             "exact_runtimes = true\n"
                                                             "predict_runtimes = true\n"
                                                             "predict_history = 3\n"
                                                             "predict_scale = 1.5\n"
                                                             "cycle_period = \"10m\"\n"
                                                             "checkpoint_interval = \"30m\"\n"
                                                             "seed = 5\n"));
  SimConfig from_file = WithSimulationSettings(SimConfig{}, file.simulation);
  CHECK(from_file.exact_runtimes);
  CHECK(from_file.predict_runtimes);
  CHECK(from_file.predict_history == 3);
  CHECK(from_file.predict_scale == 1.5);
  CHECK(from_file.cycle_period_s == 600);
  CHECK(from_file.checkpoint_interval_s == 1800);
  CHECK(from_file.seed == 5u);
  CHECK(DescribePolicy(*file.policy, from_file) == "fifo, exact run times, user-history runtime predictions");

  SimConfig command_line;  // mlsim --seed 9 --cycle-period 0
  command_line.seed = 9;
  command_line.cycle_period_s = 0;
  const SimConfig both = WithSimulationSettings(command_line, file.simulation);
  CHECK(both.seed == 9u);
  CHECK(both.cycle_period_s == 0);
  CHECK(both.checkpoint_interval_s == 1800);

  const SimConfig defaults = WithSimulationSettings(SimConfig{}, ReadPolicy("").simulation);
  CHECK_FALSE(defaults.exact_runtimes);
  CHECK_FALSE(defaults.predict_runtimes);
  CHECK(defaults.predict_history == 2);
  CHECK(defaults.predict_scale == 1.0);
  CHECK(defaults.cycle_period_s == 0);
  CHECK(defaults.checkpoint_interval_s == 0);
  CHECK(defaults.seed == 1u);
}

TEST_CASE("a misspelt [simulation] key is a FILE:LINE error for mlsim and schedd alike",
          "[sim][policy]") {
  const std::string text = "[scheduler]\nqueue_order = \"fifo\"\n[simulation]\npredict_runtime = true\n";
  const std::string path = WriteTemp("misspelt.toml", text);
  const std::string expected = path + ":4:1: unknown key 'predict_runtime' in [simulation]";
  CHECK_THAT(PolicyError("misspelt.toml", text), Catch::StartsWith(expected));
  const policy::PolicyLoadResult schedd = policy::LoadPolicyFile(path);  // schedd --policy
  REQUIRE_FALSE(schedd.ok());
  REQUIRE(schedd.errors.size() == 1);
  CHECK_THAT(schedd.errors[0].ToString(), Catch::StartsWith(expected));
  SimConfig c;  // mlsim --policy: refused before the trace is read
  c.trace_path = WriteTemp("unused.swf", "; MaxProcs: 4\n");
  c.policy_path = path;
  CHECK_THROWS_WITH(RunReplay(c), Catch::StartsWith(expected));
  // Values are checked too, each at its line.
  CHECK_THAT(PolicyError("scale.toml", "[simulation]\nseed = 1\npredict_scale = 0\n"),
             Catch::Contains("scale.toml:3:") && Catch::Contains("predict_scale"));
  CHECK_THAT(PolicyError("period.toml", "[simulation]\ncycle_period = \"10 min\"\n"),
             Catch::Contains("period.toml:2:") && Catch::Contains("cycle_period"));
}

TEST_CASE("[prediction] is mlsim's default below [simulation] and the command line", "[sim][policy]") {
  const policy::PolicyLoadResult file =
      ReadPolicy(WriteTemp("prediction.toml", "[prediction]\nenabled = true\nhistory = 4\n"));
  const SimConfig from_prediction =
      WithSimulationSettings(SimConfig{}, file.simulation, file.policy->prediction);
  CHECK(from_prediction.predict_runtimes);
  CHECK(from_prediction.predict_history == 4);
  const policy::PolicyLoadResult both = ReadPolicy(WriteTemp(
      "prediction2.toml", "[prediction]\nhistory = 4\n[simulation]\npredict_history = 3\n"));
  const SimConfig simulation_wins =
      WithSimulationSettings(SimConfig{}, both.simulation, both.policy->prediction);
  CHECK_FALSE(simulation_wins.predict_runtimes);  // [prediction] is not enabled
  CHECK(simulation_wins.predict_history == 3);
  SimConfig command_line;  // mlsim --predict-history 7
  command_line.predict_history = 7;
  CHECK(WithSimulationSettings(command_line, both.simulation, both.policy->prediction).predict_history == 7);
}

TEST_CASE("mlsim --predictor without anything that predicts is an error, not ignored", "[sim][policy]") {
  const policy::PolicyLoadResult off = ReadPolicy("");
  SimConfig command_line;  // mlsim --predictor online-linear
  command_line.predictor = "online-linear";
  CHECK_THROWS_WITH(WithSimulationSettings(command_line, off.simulation, off.policy->prediction),
                    Catch::Contains("--predictor online-linear has no effect") && Catch::Contains("--predict-runtimes"));
  SimConfig predicting = command_line;  // ... --predict-runtimes
  predicting.predict_runtimes = true;
  CHECK(WithSimulationSettings(predicting, off.simulation, off.policy->prediction).predictor == "online-linear");
  SimConfig estimating = command_line;  // ... --estimate-with-predictions
  estimating.estimate_with_predictions = true;
  CHECK(WithSimulationSettings(estimating, off.simulation, off.policy->prediction).predictor == "online-linear");
  const policy::PolicyLoadResult on = ReadPolicy(WriteTemp("on.toml", "[prediction]\nenabled = true\n"));
  CHECK(WithSimulationSettings(command_line, on.simulation, on.policy->prediction).predict_runtimes);
}

TEST_CASE("mlsim --predict-correction - the policy's correction unless given - and an error when nothing predicts",
          "[sim][policy]") {
  const policy::PolicyLoadResult off = ReadPolicy("");
  SimConfig command_line;  // mlsim --predict-correction doubling
  command_line.predict_correction = "doubling";
  CHECK_THROWS_WITH(WithSimulationSettings(command_line, off.simulation, off.policy->prediction),
                    Catch::Contains("--predict-correction doubling has no effect"));
  command_line.predict_runtimes = true;
  CHECK(WithSimulationSettings(command_line, off.simulation, off.policy->prediction).predict_correction == "doubling");
  const policy::PolicyLoadResult doubling =
      ReadPolicy(WriteTemp("doubling.toml", "[prediction]\nenabled = true\ncorrection = \"doubling\"\n"));
  CHECK(WithSimulationSettings(SimConfig{}, doubling.simulation, doubling.policy->prediction).predict_correction ==
        "doubling");
  CHECK(WithSimulationSettings(SimConfig{}, off.simulation, off.policy->prediction).predict_correction == "incremental");
}

TEST_CASE("mlsim --predict-history-by - the policy's history_by unless given - and an error when nothing predicts",
          "[sim][policy]") {
  const policy::PolicyLoadResult off = ReadPolicy("");
  SimConfig command_line;  // mlsim --predict-history-by request
  command_line.predict_history_by = "request";
  CHECK_THROWS_WITH(WithSimulationSettings(command_line, off.simulation, off.policy->prediction),
                    Catch::Contains("--predict-history-by request has no effect"));
  command_line.predict_runtimes = true;
  CHECK(WithSimulationSettings(command_line, off.simulation, off.policy->prediction).predict_history_by == "request");
  const policy::PolicyLoadResult by_request =
      ReadPolicy(WriteTemp("by-request.toml", "[prediction]\nenabled = true\nhistory_by = \"request\"\n"));
  CHECK(WithSimulationSettings(SimConfig{}, by_request.simulation, by_request.policy->prediction).predict_history_by ==
        "request");
  CHECK(WithSimulationSettings(SimConfig{}, off.simulation, off.policy->prediction).predict_history_by == "user");
}
