// Start-time estimates (JobOutcome::estimate_at_submit / estimate_recheck, ComputeStartEstimates)
// and mlsim --compare's pieces (SplitPolicyList, the table and the wait-distribution SVG).
#include <catch2/catch.hpp>

#include <sstream>

#include "schedd/sim/compare.h"
#include "schedd/sim/report.h"
#include "schedd/sim/simulator.h"
#include "schedd/sim/start_estimates.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::CpuJob;

namespace {

Trace MakeTrace(std::vector<TraceJob> jobs) {
  Trace t;
  t.name = "test";
  t.format = "swf";
  t.jobs = std::move(jobs);
  FinalizeTrace(t);
  return t;
}

SimOptions WithBackfill(mlsched::core::BackfillMode mode) {
  SimOptions o;
  o.policy.backfill.mode = mode;
  return o;
}

// A(4 cpus, runs 100 s of a 1000 s limit) at 0, B(4, 50 of 500) at 10, C(4, 10 of 100) at 20 on a
// 4-processor pool: B is planned at A's limit (1000), C after B's limit (1500); A ends at 100,
// B starts then, C at 150.
Trace ThreeJobs() {
  return MakeTrace({CpuJob(1, 0, 100, 4, 1000), CpuJob(2, 10, 50, 4, 500), CpuJob(3, 20, 10, 4, 100)});
}

}  // namespace

TEST_CASE("conservative backfill plans every pending job at its submission", "[sim]") {
  SimResult r = Simulate(ThreeJobs(), UniformFleet(1, 4, 16, 0, "gpu"),
                         WithBackfill(mlsched::core::BackfillMode::kConservative));
  CHECK(r.jobs[0].estimate_at_submit == -1);  // started at once: no estimate
  CHECK(r.jobs[1].estimate_at_submit == 1000);
  CHECK(r.jobs[2].estimate_at_submit == 1500);
  CHECK(r.jobs[1].first_start == 100);
  CHECK(r.jobs[2].first_start == 150);
  CHECK(r.jobs[2].estimate_recheck == -1);    // started within the hour: not pending then
  const StartEstimateMetrics m = ComputeStartEstimates(r);
  CHECK(m.at_submit.pending == 2);
  CHECK(m.at_submit.estimated == 2);
  CHECK(m.at_submit.median_abs_error_s == 900);  // nearest rank of {900, 1350}
  CHECK(m.at_submit.mean_abs_error_s == 1125);
  CHECK(m.at_submit.median_error_s == -1350);
  CHECK(m.at_submit.within_15m == 0.5);          // |-900| <= 900
  CHECK(m.at_submit.within_1h == 1.0);
  CHECK(m.at_submit.started_early == 1.0);
  CHECK(m.after_recheck.pending == 0);
  CHECK(m.after_recheck.estimated == 0);
}

TEST_CASE("EASY plans only the head of the queue", "[sim]") {
  SimResult r = Simulate(ThreeJobs(), UniformFleet(1, 4, 16, 0, "gpu"),
                         WithBackfill(mlsched::core::BackfillMode::kEasy));
  CHECK(r.jobs[1].estimate_at_submit == 1000);
  CHECK(r.jobs[2].estimate_at_submit == -1);
  const StartEstimateMetrics m = ComputeStartEstimates(r);
  CHECK(m.at_submit.pending == 2);
  CHECK(m.at_submit.estimated == 1);
}

TEST_CASE("the estimate 1 h after submission is the last plan made by then", "[sim]") {
  // B waits 4900 s for A (limit 10000 s): no cycle runs between B's submission and A's end, so
  // the plan a user sees an hour later is still the one made at submission.
  Trace t = MakeTrace({CpuJob(1, 0, 5000, 4, 10000), CpuJob(2, 100, 10, 4, 10)});
  SimResult r = Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"),
                         WithBackfill(mlsched::core::BackfillMode::kConservative));
  CHECK(r.jobs[1].estimate_at_submit == 10000);
  CHECK(r.jobs[1].estimate_recheck == 10000);
  CHECK(r.jobs[1].first_start == 5000);
  const StartEstimateMetrics m = ComputeStartEstimates(r);
  CHECK(m.after_recheck.pending == 1);
  CHECK(m.after_recheck.estimated == 1);
  CHECK(m.after_recheck.median_error_s == -5000);
  CHECK(m.after_recheck.within_1h == 0.0);
}

TEST_CASE("the estimate section appears in the table and JSON only when asked for", "[sim]") {
  SimResult r = Simulate(ThreeJobs(), UniformFleet(1, 4, 16, 0, "gpu"),
                         WithBackfill(mlsched::core::BackfillMode::kConservative));
  const Metrics m = ComputeMetrics(r);
  const StartEstimateMetrics e = ComputeStartEstimates(r);
  std::ostringstream plain, with, json_plain, json_with;
  WriteTable(plain, RunInfo{}, r, m);
  WriteTable(with, RunInfo{}, r, m, &e);
  WriteJson(json_plain, RunInfo{}, r, m);
  WriteJson(json_with, RunInfo{}, r, m, &e);
  CHECK(plain.str().find("start-time estimates") == std::string::npos);
  CHECK(with.str().find("start-time estimates") != std::string::npos);
  CHECK(with.str().rfind(plain.str(), 0) == 0);  // the section is appended, nothing else changes
  CHECK(json_plain.str().find("start_estimates") == std::string::npos);
  CHECK(json_with.str().find("\"median_abs_error_s\": 900.0") != std::string::npos);
}

TEST_CASE("mlsim compare's policy list needs two or more non-empty names", "[sim]") {
  CHECK(SplitPolicyList("a.toml,b/c.toml") == std::vector<std::string>{"a.toml", "b/c.toml"});
  CHECK_THROWS_WITH(SplitPolicyList("a.toml"), Catch::Contains("at least two"));
  CHECK_THROWS_WITH(SplitPolicyList("a.toml,,b.toml"), Catch::Contains("position 2"));
}

TEST_CASE("the compare SVG has one wait distribution per policy", "[sim]") {
  std::vector<CompareRow> rows(3);
  rows[0].name = "easy";
  rows[0].waits_s = {0, 0, 30, 4000};
  rows[1].name = "cons";
  rows[1].waits_s = {0, 10, 100, 200000};
  rows[2].name = "x<y";
  std::ostringstream svg, table;
  WriteCompareSvg(svg, "t", rows);
  const std::string s = svg.str();
  size_t lines = 0;
  for (size_t at = s.find("<polyline"); at != std::string::npos; at = s.find("<polyline", at + 1)) ++lines;
  CHECK(lines == 3);
  CHECK(s.find("id=\"policy-2\"") != std::string::npos);
  CHECK(s.find("x&lt;y") != std::string::npos);  // legend escaped
  CHECK(s.find(">10 d</text>") != std::string::npos);  // axis reaches the longest wait
  WriteCompareTable(table, "trace", rows);
  CHECK(table.str().find("\neasy ") != std::string::npos);
  CHECK(table.str().find("\ncons ") != std::string::npos);
}

TEST_CASE("a shadow pass with predicted run times estimates without changing the schedule", "[sim]") {
  // u1's first job runs 100 s of its 1000 s limit; the second is planned to end at its limit
  // (1200) with time limits, at 200 + 100 s with the prediction (mean of the user's last runs).
  Trace t = MakeTrace({CpuJob(1, 0, 100, 4, 1000), CpuJob(2, 200, 100, 4, 1000),
                       CpuJob(3, 210, 10, 4, 100)});
  const Fleet fleet = UniformFleet(1, 4, 16, 0, "gpu");
  SimOptions limits = WithBackfill(mlsched::core::BackfillMode::kConservative);
  const SimResult plain = Simulate(t, fleet, limits);
  mlsched::core::UserMeanPredictor predictor;
  SimOptions shadow = limits;
  shadow.estimate_predictor = &predictor;
  const SimResult r = Simulate(t, fleet, shadow);
  CHECK(plain.jobs[2].estimate_at_submit == 1200);
  CHECK(r.jobs[2].estimate_at_submit == 300);
  for (size_t i = 0; i < 3; ++i) CHECK(r.jobs[i].first_start == plain.jobs[i].first_start);
  CHECK(r.jobs[2].first_start == 300);
  CHECK(r.cycles == plain.cycles);
}
