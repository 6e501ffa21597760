#include <catch2/catch.hpp>

#include "schedd/core/provisioning.h"
#include "schedd/core/types.h"
#include "schedd/policy/policy_loader.h"

using namespace mlsched;
using policy::ParsePolicy;

namespace {
const std::string kPolicies = MLSCHED_POLICIES_DIR;
}

TEST_CASE("the shipped policies load", "[policy]") {
  SECTION("default.toml") {
    auto r = policy::LoadPolicyFile(kPolicies + "/default.toml");
    INFO(r.ErrorText());
    REQUIRE(r.ok());
    const core::PolicySet& p = *r.policy;
    CHECK(p.queue_order == core::QueueOrder::kMultifactor);
    CHECK(p.backfill.mode == core::BackfillMode::kEasy);
    CHECK(p.backfill.window == 7 * 86400);
    CHECK(p.weights.fairshare == 10000);
    CHECK(p.fairshare.billing_weights.at("gpu") == 10.0);
    REQUIRE(p.partitions.size() == 1);
    CHECK(p.partitions[0].pools.empty());
    CHECK(p.partitions[0].default_time_limit == 3600);
    CHECK(p.operators == std::vector<std::string>{"root"});
    CHECK(p.enforce_associations);
  }
  SECTION("examples/gpu-cluster.toml") {
    auto r = policy::LoadPolicyFile(kPolicies + "/examples/gpu-cluster.toml");
    INFO(r.ErrorText());
    REQUIRE(r.ok());
    const core::PolicySet& p = *r.policy;
    CHECK(p.backfill.mode == core::BackfillMode::kConservative);
    CHECK(p.backfill.depth == 50);
    CHECK(p.backfill.resolution == 60);
    CHECK(p.fairshare.algorithm == core::FairshareAlgorithm::kFairTree);
    CHECK(p.fairshare.billing_weights.at("gpu:h100") == 40.0);
    REQUIRE(p.partitions.size() == 2);
    CHECK(p.partitions[1].pools == std::vector<std::string>{"spot"});
    CHECK(p.partitions[1].max_tasks_per_job == 64);
    REQUIRE(p.qos.size() == 3);
    CHECK(p.qos[1].max_wall == 8 * 3600);
    REQUIRE(p.accounts.size() == 4);
    CHECK(p.accounts[1].parent == "research");
    CHECK(p.accounts[1].user_shares.at("alice") == 2);
    CHECK(p.accounts[3].max_cpu_millis == 4096 * 1000);
    // Associations: enforced, with member lists, QoS and account allow lists and a default account.
    CHECK(p.enforce_associations);
    CHECK(p.accounts[0].allow_qos == std::vector<std::string>{"normal", "scavenger"});
    CHECK(p.accounts[2].user_shares.count("carol") == 1);
    CHECK(p.partitions[1].allow_accounts == std::vector<std::string>{"vision", "nlp"});
    CHECK(p.partitions[1].source.Of("allow_accounts").rfind(kPolicies + "/examples/gpu-cluster.toml:", 0) == 0);
    REQUIRE(p.users.size() == 1);
    CHECK(p.users[0].default_account == "nlp");
  }
  SECTION("examples/provisioning.toml") {
    auto r = policy::LoadPolicyFile(kPolicies + "/examples/provisioning.toml");
    INFO(r.ErrorText());
    REQUIRE(r.ok());
    REQUIRE(r.policy->provisioning.size() == 1);
    CHECK(r.policy->provisioning[0].max_nodes == 8);
    CHECK(core::NodeCostPerHour(r.policy->provisioning[0].shape, *r.policy) == Approx(32 * 0.01 + 4 * 1.20));
  }
}

TEST_CASE("QoS preemption settings are read", "[policy]") {
  auto r = ParsePolicy("default_qos = \"low\"\n"
                       "[[qos]]\nname = \"low\"\npreempt_mode = \"cancel\"\ngrace_time = \"2m\"\n"
                       "preempt_exempt_time = \"10m\"\nmax_preemptions = 3\n"
                       "[[qos]]\nname = \"high\"\npreempt = [\"low\"]\n",
                       "p.toml");
  REQUIRE(r.ok());
  const auto& q = r.policy->qos;
  REQUIRE(q.size() == 2);
  CHECK(q[0].preempt_mode == core::PreemptMode::kCancel);
  CHECK(q[0].grace_time == 120);
  CHECK(q[0].preempt_exempt_time == 600);
  CHECK(q[0].max_preemptions == 3);
  CHECK(q[1].preempt == std::vector<std::string>{"low"});
}

TEST_CASE("placement, pricing and victim order are read", "[policy]") {
  auto r = ParsePolicy("default_qos = \"critical\"\n[placement]\nspot_max_evictions = 2\nspot_wait_budget = \"15m\"\negress_per_gb = 0.09\n"
                       "eviction_rate_per_hour = { spot = 0.05 }\n[pricing.spot]\ncpu_hour = 0.015\n"
                       "gpu_hour = { h100 = 1.6, a100 = 1 }\n[pricing.on-demand]\ngpu_hour = 4\n"
                       "[preemption]\nvictim_order = \"youngest-first\"\n[[qos]]\nname = \"critical\"\n"
                       "[[warm_pools]]\npool = \"on-demand\"\nnodes = 4\nqos = \"critical\"\nborrow_limit = \"1h\"\n",
                       "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const core::PlacementPolicy& p = r.policy->placement;
  CHECK(p.spot_max_evictions == 2);
  CHECK(p.spot_wait_budget == 900);
  CHECK(p.egress_per_gb == Approx(0.09));
  CHECK(p.eviction_rate_per_hour.at("spot") == Approx(0.05));
  CHECK(p.pricing.at("spot").cpu_hour == Approx(0.015));
  CHECK(p.pricing.at("spot").gpu_hour.at("a100") == Approx(1.0));
  CHECK(p.pricing.at("on-demand").gpu_hour.at("") == Approx(4.0));
  CHECK(r.policy->victim_order == core::VictimOrder::kYoungestFirst);
  REQUIRE(r.policy->warm_pools.size() == 1);
  CHECK(r.policy->warm_pools[0].nodes == 4);
  CHECK(r.policy->warm_pools[0].borrow_limit == 3600);
}

TEST_CASE("the [simulation] table is validated and kept apart for mlsim", "[policy]") {
  auto r = ParsePolicy("[scheduler]\nqueue_order = \"multifactor\"\n"
                       "[simulation]\nexact_runtimes = true\npredict_history = 4\npredict_scale = 0.5\n"
                       "cycle_period = \"5m\"\ncheckpoint_interval = 900\nseed = 42\n",
                       "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const policy::SimulationSettings& s = r.simulation;
  CHECK(s.exact_runtimes);
  CHECK_FALSE(s.predict_runtimes);
  CHECK(s.predict_history == 4);
  CHECK(s.predict_scale == 0.5);
  CHECK(s.cycle_period == 300);
  CHECK(s.checkpoint_interval == 900);
  CHECK(s.seed == 42u);
  CHECK(r.policy->queue_order == core::QueueOrder::kMultifactor);  // the policy itself is unchanged
  // Absent: nothing set (mlsim's own defaults then apply).
  auto none = ParsePolicy("", "empty.toml");
  REQUIRE(none.ok());
  CHECK_FALSE(none.simulation.exact_runtimes);
  CHECK_FALSE(none.simulation.predict_history.has_value());
  CHECK_FALSE(none.simulation.seed.has_value());
}

TEST_CASE("the [prediction] table is read into the policy", "[policy][prediction]") {
  auto r = ParsePolicy("[prediction]\nenabled = true\npredictor = \"user-mean\"\nhistory = 5\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK(r.policy->prediction.enabled);
  CHECK(r.policy->prediction.predictor == "user-mean");
  CHECK(r.policy->prediction.history == 5);
  CHECK(r.policy->prediction.correction == core::PredictionCorrection::kIncremental);  // the default
  auto doubling = ParsePolicy("[prediction]\nenabled = true\ncorrection = \"doubling\"\n", "p.toml");
  INFO(doubling.ErrorText());
  REQUIRE(doubling.ok());
  CHECK(doubling.policy->prediction.correction == core::PredictionCorrection::kDoubling);
  CHECK(doubling.policy->prediction.history_by == core::HistoryBy::kUser);  // the default
  auto by_request = ParsePolicy("[prediction]\nenabled = true\nhistory_by = \"request\"\n", "p.toml");
  INFO(by_request.ErrorText());
  REQUIRE(by_request.ok());
  CHECK(by_request.policy->prediction.history_by == core::HistoryBy::kRequest);
  auto bounds = ParsePolicy("[prediction]\nhistory = 64\n", "p.toml");
  REQUIRE(bounds.ok());
  CHECK_FALSE(bounds.policy->prediction.enabled);
  CHECK(bounds.policy->prediction.history == 64);
  auto none = ParsePolicy("", "empty.toml");
  REQUIRE(none.ok());
  CHECK_FALSE(none.policy->prediction.enabled);  // off unless the file turns it on
  CHECK(none.policy->prediction.history == 2);
}

TEST_CASE("the wide-job starvation guard is read - 0 turns it off", "[policy]") {
  auto r = ParsePolicy("[backfill]\nreserve_after = \"2d\"\nreserve_after_wide = \"1d\"\nwide_fraction = 0.6\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK(r.policy->backfill.reserve_after_wide == 86400);
  CHECK(r.policy->backfill.wide_fraction == 0.6);
  for (const char* off : {"[backfill]\nreserve_after_wide = 0\n", "[backfill]\nreserve_after = \"1d\"\nreserve_after_wide = 0\n"}) {
    auto o = ParsePolicy(off, "p.toml");
    INFO(o.ErrorText());
    CHECK(o.ok());
  }
}

TEST_CASE("an empty file is the built-in default policy", "[policy]") {
  auto r = ParsePolicy("", "empty.toml");
  REQUIRE(r.ok());
  CHECK(r.policy->partitions.size() == 1);
  CHECK(r.policy->backfill.mode == core::BackfillMode::kNone);
}

TEST_CASE("every error is reported as FILE:LINE:COL and no policy comes back", "[policy]") {
  struct Row { const char* what; const char* text; std::vector<std::string> errors; };
  std::vector<Row> table{
      {"unknown top-level key", "default_partition = \"default\"\nbackfil = 1\n",
       {"p.toml:2:1: unknown key 'backfil' in the top level; expected one of: default_partition, default_qos, "
        "operators, enforce_associations, scheduler, backfill, priority, fairshare, partitions, qos, accounts, "
        "users, pricing, placement, preemption, warm_pools, limits, simulation, prediction, elastic, provisioning, "
        "inventory, nodes, interactive, health, watchdog, idle"}},
      {"unknown [prediction] key", "[prediction]\nenabled = true\nhistroy = 3\n",
       {"p.toml:3:1: unknown key 'histroy' in [prediction]; expected one of: enabled, predictor, history, correction, history_by"}},
      {"bad [prediction] values",
       "[prediction]\nenabled = \"yes\"\npredictor = \"oracle\"\nhistory = 65\ncorrection = \"halving\"\n",
       {"p.toml:2:11: 'enabled' in [prediction]: expected true or false, got a string",
        "p.toml:3:13: 'predictor' in [prediction]: expected \"user-mean\" or \"online-linear\", got \"oracle\"",
        "p.toml:4:11: 'history' in [prediction]: must be <= 64, got 65",
        "p.toml:5:14: 'correction' in [prediction]: expected \"incremental\" or \"doubling\", got \"halving\""}},
      {"[prediction] correction not a string - one error", "[prediction]\ncorrection = 2\n",
       {"p.toml:2:14: 'correction' in [prediction]: expected a string, got an integer"}},
      {"[prediction] unknown history_by", "[prediction]\nenabled = true\nhistory_by = \"shape\"\n",
       {"p.toml:3:14: 'history_by' in [prediction]: expected \"user\" or \"request\", got \"shape\""}},
      {"[prediction] history_by not a string - one error", "[prediction]\nhistory_by = false\n",
       {"p.toml:2:14: 'history_by' in [prediction]: expected a string, got a boolean"}},
      {"[prediction] history below 1 and predictor not a string",
       "[prediction]\nhistory = 0\npredictor = 1\n",
       {"p.toml:3:13: 'predictor' in [prediction]: expected a string, got an integer",
        "p.toml:2:11: 'history' in [prediction]: must be >= 1, got 0"}},
      {"[prediction] not a table", "prediction = true\n",
       {"p.toml:1:14: 'prediction': expected a table ([prediction])"}},
      {"misspelt [simulation] key", "[simulation]\nseed = 3\npredict_runtime = true\n",
       {"p.toml:3:1: unknown key 'predict_runtime' in [simulation]; expected one of: exact_runtimes, "
        "predict_runtimes, predict_history, predict_scale, cycle_period, checkpoint_interval, seed"}},
      {"bad [simulation] values",
       "[simulation]\npredict_history = 0\npredict_scale = 0\ncycle_period = \"often\"\nseed = -1\n"
       "exact_runtimes = \"yes\"\n",
       {"p.toml:6:18: 'exact_runtimes' in [simulation]: expected true or false, got a string",
        "p.toml:2:19: 'predict_history' in [simulation]: must be >= 1, got 0",
        "p.toml:3:17: 'predict_scale' in [simulation]: must be > 0",
        "p.toml:4:16: 'cycle_period' in [simulation]: invalid duration 'often'; expected seconds or e.g. \"90s\", "
        "\"45m\", \"4h\", \"7d\", \"1-12:00:00\"",
        "p.toml:5:8: 'seed' in [simulation]: must be >= 0, got -1"}},
      {"[simulation] not a table", "simulation = 1\n", {"p.toml:1:14: 'simulation': expected a table ([simulation])"}},
      {"warm pool for an unknown QoS and pool",
       "[[warm_pools]]\npool = \"warm\"\nnodes = 2\nqos = \"vip\"\n",
       {"p.toml:2:8: [[warm_pools]] #1: 'pool' must be \"on-demand\", \"spot\" or \"reserved\" (got \"warm\")",
        "p.toml:1:1: [[warm_pools]] #1: QoS 'vip' is not a defined QoS"}},
      {"unknown pool in [pricing] and [placement]",
       "[pricing.cheap]\ncpu_hour = 1\n[placement]\neviction_rate_per_hour = { spott = 0.1 }\n",
       {"p.toml:4:36: 'eviction_rate_per_hour' in [placement]: unknown pool 'spott' (expected \"on-demand\", "
        "\"spot\" or \"reserved\")",
        "p.toml:1:1: unknown pool 'cheap' in [pricing] (expected \"on-demand\", \"spot\" or \"reserved\")"}},
      {"bad placement values", "[placement]\negress_per_gb = \"free\"\nspot_wait_budget = \"soon\"\n",
       {"p.toml:3:20: 'spot_wait_budget' in [placement]: invalid duration 'soon'; expected seconds or e.g. "
        "\"90s\", \"45m\", \"4h\", \"7d\", \"1-12:00:00\"",
        "p.toml:2:17: 'egress_per_gb' in [placement]: expected a number"}},
      {"unknown key in a table", "[backfill]\nmode = \"easy\"\nwindw = 5\n",
       {"p.toml:3:1: unknown key 'windw' in [backfill]; expected one of: mode, order, depth, max_job_test, window, "
        "resolution, keep_plans, reserve_after, reserve_after_wide, wide_fraction"}},
      {"bad wide guard", "[backfill]\nwide_fraction = 1.5\nreserve_after_wide = \"1d\"\n",
       {"p.toml:2:17: 'wide_fraction' in [backfill]: must be in (0, 1] (a share of the job's eligible capacity)",
        "p.toml:3:22: 'reserve_after_wide' in [backfill]: needs 'reserve_after' (the guard for every job) too"}},
      {"wide guard not shorter", "[backfill]\nreserve_after = \"1d\"\nreserve_after_wide = \"2d\"\n",
       {"p.toml:3:22: 'reserve_after_wide' in [backfill]: must be shorter than 'reserve_after' (else it changes nothing)"}},
      {"wrong type", "[backfill]\ndepth = \"ten\"\n",
       {"p.toml:2:9: 'depth' in [backfill]: expected an integer, got a string"}},
      {"bad enum", "[backfill]\nmode = \"lazy\"\n",
       {"p.toml:2:8: 'mode' in [backfill]: expected \"none\", \"easy\" or \"conservative\", got \"lazy\""}},
      {"bad duration", "[priority]\nmax_age = \"7 days\"\n",
       {"p.toml:2:11: 'max_age' in [priority]: invalid duration '7 days'; expected seconds or e.g. \"90s\", "
        "\"45m\", \"4h\", \"7d\", \"1-12:00:00\""}},
      {"negative weight", "[priority]\nweight_age = -1\n",
       {"p.toml:2:14: 'weight_age' in [priority]: must be >= 0, got -1"}},
      {"syntax error", "[backfill\nmode = 1\n", {}},
      {"unknown pool and missing default partition",
       "default_partition = \"gpu\"\n[[partitions]]\nname = \"cpu\"\npools = [\"cheap\"]\n",
       {"p.toml:4:9: [[partitions]] #1: unknown pool 'cheap'; expected on-demand, spot or reserved",
        "p.toml:1:21: default_partition 'gpu' is not a defined partition"}},
      {"unknown parent account",
       "[[accounts]]\nname = \"a\"\nparent = \"nobody\"\n",
       {"p.toml:1:1: account 'a': parent 'nobody' is not a defined account"}},
      {"account cycle",
       "[[accounts]]\nname = \"a\"\nparent = \"b\"\n[[accounts]]\nname = \"b\"\nparent = \"a\"\n",
       {"p.toml:1:1: account 'a': the parent chain loops back through 'a'",
        "p.toml:1:1: account 'b': the parent chain loops back through 'b'"}},
      {"default QoS missing", "[[qos]]\nname = \"high\"\n",
       {"p.toml:1:1: default_qos 'normal' is not a defined QoS"}},
      {"preempting an unknown QoS",
       "default_qos = \"low\"\n[[qos]]\nname = \"low\"\n[[qos]]\nname = \"high\"\npreempt = [\"lowe\"]\n",
       {"p.toml:2:1: QoS 'high': preempt names 'lowe', which is not a defined QoS"}},
      {"mutual preemption",
       "default_qos = \"a\"\n[[qos]]\nname = \"a\"\npreempt = [\"b\"]\n[[qos]]\nname = \"b\"\npreempt = [\"a\"]\n",
       {"p.toml:2:1: QoS 'a' can preempt itself through its preempt list (preemption must be one-way)",
        "p.toml:2:1: QoS 'b' can preempt itself through its preempt list (preemption must be one-way)"}},
      {"bad preempt mode", "default_qos = \"a\"\n[[qos]]\nname = \"a\"\npreempt_mode = \"suspend\"\n",
       {"p.toml:4:16: 'preempt_mode' in [[qos]] #1: expected \"requeue\" or \"cancel\", got \"suspend\""}},
      {"billing resource", "[fairshare.billing_weights]\ndisk = 1.0\n",
       {"p.toml:2:1: unknown billing resource 'disk'; expected cpu, mem, gpu or gpu:TYPE"}},
  };
  for (const Row& row : table) {
    SECTION(row.what) {
      auto r = ParsePolicy(row.text, "p.toml");
      CHECK_FALSE(r.ok());
      CHECK_FALSE(r.policy.has_value());
      REQUIRE_FALSE(r.errors.empty());
      if (row.errors.empty()) {
        CHECK(r.errors[0].ToString().rfind("p.toml:1:", 0) == 0);  // the parser's own message
      } else {
        std::vector<std::string> got;
        for (const auto& e : r.errors) got.push_back(e.ToString());
        CHECK(got == row.errors);
      }
    }
  }
}

TEST_CASE("an unreadable file is one error", "[policy]") {
  auto r = policy::LoadPolicyFile("/nonexistent/policy.toml");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].ToString() == "/nonexistent/policy.toml:0:0: cannot read the policy file");
}

TEST_CASE("durations: seconds, unit groups and Slurm clock forms", "[policy]") {
  struct Row { const char* text; std::optional<core::Duration> seconds; };
  std::vector<Row> table{{"90", 90},          {"45m", 2700},      {"4h", 14400},   {"1d12h", 129600},
                         {"2w", 1209600},     {"1-12:00:00", 129600}, {"01:30:00", 5400}, {"10:05", 605},
                         {"", std::nullopt},  {"4x", std::nullopt}, {"1h30", std::nullopt},
                         {"-5", std::nullopt}, {"1:2:3:4", std::nullopt}};
  for (const Row& row : table) {
    INFO(row.text);
    CHECK(policy::ParseDuration(row.text) == row.seconds);
  }
}

// Found by review and confirmed with fuzz/units_fuzz.cc (UBSan): unit groups were summed without
// a bound, so "999999999999w" x 16 overflowed int64. Durations are now capped at kMaxDuration,
// and so are integer seconds in a policy file.
TEST_CASE("an account's max_cpus too large for millicores is an error, not an overflow", "[policy][fuzz]") {
  // Found by the policy fuzz target: max_cpus * 1000 overflowed int64 (UBSan).
  auto r = ParsePolicy("[[accounts]]\nname = \"prod\"\nmax_cpus = 4095555555555555556\n", "p.toml");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.ErrorText(), Catch::Contains("p.toml:3:") && Catch::Contains("'max_cpus'") && Catch::Contains("must be <="));
  auto ok = ParsePolicy("[[accounts]]\nname = \"prod\"\nmax_cpus = 4096\n", "p.toml");
  REQUIRE(ok.ok());
  CHECK(ok.policy->accounts.back().max_cpu_millis == 4096000);
}

TEST_CASE("durations beyond 1000 years are invalid, not overflows", "[policy][fuzz]") {
  std::string many;
  for (int i = 0; i < 16; ++i) many += "999999999999w";
  CHECK_FALSE(policy::ParseDuration(many));
  CHECK_FALSE(policy::ParseDuration("999999999999w"));  // 6e17 s: fits int64, but over the cap
  CHECK_FALSE(policy::ParseDuration("999999999999-00:00:00"));
  CHECK(policy::ParseDuration(std::to_string(policy::kMaxDuration)) == policy::kMaxDuration);
  CHECK_FALSE(policy::ParseDuration(std::to_string(policy::kMaxDuration + 1)));
  CHECK(policy::ParseDuration("52000w") == int64_t{52000} * 7 * 86400);
  auto r = ParsePolicy("[backfill]\nwindow = 9223372036854775807\n", "p.toml");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.ErrorText(), Catch::Contains("p.toml:2:") && Catch::Contains("at most"));
  r = ParsePolicy("[backfill]\nwindow = \"" + many + "\"\n", "p.toml");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.ErrorText(), Catch::Contains("invalid duration"));
}

TEST_CASE("the [elastic] table is read into the policy and its errors name FILE:LINE", "[policy][elastic]") {
  auto r = ParsePolicy("[elastic]\ngrow = false\nmin_resize_interval = \"2m\"\nrestart_cost = 15\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK_FALSE(r.policy->elastic.grow);
  CHECK(r.policy->elastic.min_resize_interval == 120);
  CHECK(r.policy->elastic.restart_cost == 15);
  auto none = ParsePolicy("", "empty.toml");
  REQUIRE(none.ok());
  CHECK(none.policy->elastic.grow);
  CHECK(none.policy->elastic.min_resize_interval == 600);
  CHECK(none.policy->elastic.restart_cost == 60);
  auto bad = ParsePolicy("[elastic]\nmin_resize_interval = -1\nresize_cost = 3\n", "bad.toml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.ErrorText(), Catch::Contains("bad.toml:2:") && Catch::Contains("'min_resize_interval' in [elastic]: must be >= 0 seconds"));
  CHECK_THAT(bad.ErrorText(), Catch::Contains("bad.toml:3:") && Catch::Contains("resize_cost"));
  CHECK(none.policy->elastic.tier_speedup == 2.0);
  CHECK(none.policy->elastic.start == mlsched::core::ElasticStart::kLargest);
  auto ef = ParsePolicy("[elastic]\nstart = \"earliest-finish\"\n", "p.toml");
  REQUIRE(ef.ok());
  CHECK(ef.policy->elastic.start == mlsched::core::ElasticStart::kEarliestFinish);
  auto bad_start = ParsePolicy("[elastic]\nstart = \"soonest\"\n", "s.toml");
  REQUIRE_FALSE(bad_start.ok());
  CHECK_THAT(bad_start.ErrorText(), Catch::Contains("s.toml:2:") && Catch::Contains("expected \"largest\" or \"earliest-finish\""));
  CHECK_FALSE(ParsePolicy("[elastic]\nstart = \"\"\n", "e.toml").ok());
  auto speedup = ParsePolicy("[elastic]\ntier_speedup = 3.5\n", "p.toml");
  REQUIRE(speedup.ok());
  CHECK(speedup.policy->elastic.tier_speedup == 3.5);
  for (const char* v : {"0.5", "1001", "\"fast\""}) {
    auto out = ParsePolicy(std::string("[elastic]\n\ntier_speedup = ") + v + "\n", "t.toml");
    REQUIRE_FALSE(out.ok());
    CHECK_THAT(out.ErrorText(), Catch::Contains("t.toml:3:") && Catch::Contains("tier_speedup"));
  }
}

TEST_CASE("[provisioning.POOL] is read into the policy with its node shape", "[policy][provisioning]") {
  auto r = ParsePolicy(
      "[pricing.spot]\ngpu_hour = { h100 = 2.5 }\ncpu_hour = 0.1\n"
      "[provisioning.spot]\nresume_program = \"/usr/lib/mlsched/resume\"\nsuspend_program = \"/usr/lib/mlsched/suspend\"\n"
      "max_nodes = 4\nidle_time = \"5m\"\nresume_timeout = 90\nmax_cost_per_hour = 30\n"
      "cpus = 16\nmemory = \"64G\"\ngpus = \"h100:4\"\nregion = \"us-east\"\nzone = \"us-east-1a\"\n"
      "domain = \"spot-a\"\nfeatures = [\"ib\"]\nroot_jobs = true\n",
      "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  REQUIRE(r.policy->provisioning.size() == 1);
  const auto& c = r.policy->provisioning[0];
  CHECK(c.pool == mlsched::core::Pool::kSpot);
  CHECK(c.resume_program == "/usr/lib/mlsched/resume");
  CHECK(c.suspend_program == "/usr/lib/mlsched/suspend");
  CHECK(c.max_nodes == 4);
  CHECK(c.idle_time == 300);
  CHECK(c.resume_timeout == 90);
  CHECK(c.max_cost_per_hour == 30);
  CHECK(c.shape.pool == mlsched::core::Pool::kSpot);
  CHECK(c.shape.capacity.cpu_millis == 16000);
  CHECK(c.shape.capacity.memory_bytes == (int64_t{64} << 30));
  CHECK(c.shape.capacity.gpus == std::map<std::string, int64_t>{{"h100", 4}});
  CHECK(c.shape.region == "us-east");
  CHECK(c.shape.zone == "us-east-1a");
  CHECK(c.shape.domain == "spot-a");
  CHECK(c.shape.features == std::vector<std::string>{"ib", mlsched::core::kRootJobsFeature});
  CHECK(c.source.keys.at("max_nodes") == "p.toml:7");
  CHECK(ParsePolicy("", "e.toml").policy->provisioning.empty());
}

TEST_CASE("[provisioning.POOL] errors name FILE:LINE and the limit", "[policy][provisioning]") {
  const std::string ok = "resume_program = \"/r\"\nsuspend_program = \"/s\"\nmax_nodes = 2\ncpus = 2\nmemory = \"4G\"\n";
  struct Row {
    const char* name;
    std::string text;
    const char* error;
  };
  const Row rows[] = {
      {"unknown pool", "[provisioning.cloud]\n" + ok, "p.toml:1:1: unknown pool 'cloud' in [provisioning]"},
      {"relative program", "[provisioning.spot]\nresume_program = \"resume.sh\"\nsuspend_program = \"/s\"\nmax_nodes = 2\ncpus = 2\nmemory = \"4G\"\n",
       "p.toml:2:18: [provisioning.spot]: 'resume_program' must be an absolute path, got \"resume.sh\""},
      {"missing suspend program", "[provisioning.spot]\nresume_program = \"/r\"\nmax_nodes = 2\ncpus = 2\nmemory = \"4G\"\n",
       "[provisioning.spot]: 'suspend_program' (an absolute path) is required"},
      {"max_nodes over the limit", "[provisioning.spot]\nresume_program = \"/r\"\nsuspend_program = \"/s\"\nmax_nodes = 5000\ncpus = 2\nmemory = \"4G\"\n",
       "p.toml:4:13: [provisioning.spot]: 'max_nodes' must be at most 4096"},
      {"max_nodes 0", "[provisioning.spot]\nresume_program = \"/r\"\nsuspend_program = \"/s\"\nmax_nodes = 0\ncpus = 2\nmemory = \"4G\"\n",
       "p.toml:4:13: 'max_nodes' in [provisioning.spot]: must be >= 1, got 0"},
      {"missing shape", "[provisioning.spot]\nresume_program = \"/r\"\nsuspend_program = \"/s\"\nmax_nodes = 2\n",
       "[provisioning.spot]: 'cpus' (the node shape) is required"},
      {"bad gpus", "[provisioning.spot]\n" + ok + "gpus = \"h100\"\n",
       "p.toml:7:8: [provisioning.spot]: 'gpus' must be \"TYPE:N\" with 1 <= N <= 64 (or \"none\"), got \"h100\""},
      {"too much memory", "[provisioning.spot]\nresume_program = \"/r\"\nsuspend_program = \"/s\"\nmax_nodes = 2\ncpus = 2\nmemory = \"65T\"\n",
       "p.toml:6:10: [provisioning.spot]: 'memory' must be above 0 and at most 70368744177664"},
      {"resume_timeout 0", "[provisioning.spot]\n" + ok + "resume_timeout = 0\n",
       "p.toml:7:18: [provisioning.spot]: 'resume_timeout' must be 1..86400 seconds"},
      {"budget without prices", "[provisioning.spot]\n" + ok + "max_cost_per_hour = 10\n",
       "p.toml:7:21: [provisioning.spot]: 'max_cost_per_hour' needs prices: add [pricing.spot]"},
      {"misspelt key", "[provisioning.spot]\n" + ok + "idle_timeout = 3\n",
       "p.toml:7:1: unknown key 'idle_timeout' in [provisioning.spot]"},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      auto r = ParsePolicy(row.text, "p.toml");
      REQUIRE_FALSE(r.ok());
      CHECK_THAT(r.ErrorText(), Catch::Contains(row.error));
    }
  }
}

TEST_CASE("[inventory] and [[nodes]] declare what nodes hold, errors name FILE:LINE", "[policy][inventory]") {
  auto r = ParsePolicy(
      "[inventory]\nstrict = true\nover_capacity = \"clamp\"\n"
      "[[nodes]]\nnames = \"gpu-[01-03]\"\npool = \"spot\"\ncpus = 64\nmemory = \"512G\"\ngpus = \"h100:8\"\n"
      "domain = \"rack-1\"\nfeatures = [\"nvlink\"]\n"
      "[[nodes]]\nnames = \"cpu-1\"\ncpus = 8\nmemory = \"32G\"\n",
      "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const auto& inv = r.policy->inventory;
  CHECK(inv.strict);
  CHECK(inv.clamp);
  REQUIRE(inv.nodes.size() == 2);
  CHECK(inv.nodes[0].names == std::vector<std::string>{"gpu-01", "gpu-02", "gpu-03"});
  CHECK(inv.nodes[0].pool == mlsched::core::Pool::kSpot);
  CHECK(inv.nodes[0].shape.capacity.cpu_millis == 64000);
  CHECK(inv.nodes[0].shape.capacity.gpus == std::map<std::string, int64_t>{{"h100", 8}});
  CHECK(inv.nodes[0].shape.domain == "rack-1");
  CHECK(inv.nodes[0].shape.features == std::vector<std::string>{"nvlink"});
  CHECK_FALSE(inv.nodes[1].pool.has_value());
  CHECK(inv.index.at("gpu-02") == 0);
  CHECK(inv.index.at("cpu-1") == 1);
  CHECK_FALSE(ParsePolicy("", "e.toml").policy->inventory.strict);

  const std::string shape = "cpus = 2\nmemory = \"4G\"\n";
  struct Row {
    const char* name;
    std::string text;
    const char* error;
  };
  const Row rows[] = {
      {"no names", "[[nodes]]\n" + shape, "p.toml:1:1: [[nodes]] #1: 'names' (a hostlist such as \"gpu-[01-16]\") is required"},
      {"bad hostlist", "[[nodes]]\nnames = \"gpu-[01-\"\n" + shape, "p.toml:2:9: [[nodes]] #1: 'names':"},
      {"declared twice", "[[nodes]]\nnames = \"a[1-2]\"\n" + shape + "[[nodes]]\nnames = \"a2\"\n" + shape,
       "p.toml:6:9: [[nodes]] #2: node 'a2' is declared by an earlier [[nodes]] entry too"},
      {"unknown pool", "[[nodes]]\nnames = \"a1\"\npool = \"cloud\"\n" + shape, "p.toml:3:8: [[nodes]] #1: unknown pool 'cloud'"},
      {"bad mode", "[inventory]\nover_capacity = \"ignore\"\n",
       "p.toml:2:17: [inventory]: 'over_capacity' must be \"refuse\" or \"clamp\", got \"ignore\""},
      {"missing shape", "[[nodes]]\nnames = \"a1\"\n", "[[nodes]] #1: 'cpus' (the node shape) is required"},
      {"max_list_items over 64", "[limits]\nmax_list_items = 65\n", "p.toml:2:18: [limits]: 'max_list_items' must be at most 64"},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      auto bad = ParsePolicy(row.text, "p.toml");
      REQUIRE_FALSE(bad.ok());
      CHECK_THAT(bad.ErrorText(), Catch::Contains(row.error));
    }
  }
}
