// Metrics: percentiles, bounded slowdown, utilization, account shares and Jain's index.
#include <catch2/catch.hpp>

#include "schedd/sim/metrics.h"

using namespace mlsched::sim;

namespace {
JobOutcome Done(const std::string& account, int64_t size, int64_t submit, int64_t start,
                int64_t run) {
  JobOutcome j;
  j.account = account;
  j.accelerator = "cpu";
  j.size = size;
  j.submit = submit;
  j.first_start = start;
  j.run_time = run;
  j.busy_s = run;
  j.end = start + run;
  j.state = mlsched::core::JobState::kCompleted;
  return j;
}
}  // namespace

TEST_CASE("nearest-rank percentiles", "[sim][metrics]") {
  std::vector<double> v{5, 1, 4, 2, 3};
  CHECK(Percentile(v, 50) == 3);
  CHECK(Percentile(v, 95) == 5);
  CHECK(Percentile(v, 0) == 1);
  std::vector<double> empty;
  CHECK(Percentile(empty, 50) == 0);
}

TEST_CASE("bounded slowdown uses tau = 10 s and is at least 1", "[sim][metrics]") {
  CHECK(BoundedSlowdown(0, 100) == 1.0);
  CHECK(BoundedSlowdown(100, 100) == 2.0);
  CHECK(BoundedSlowdown(20, 2) == Approx(2.2));  // (20 + 2) / 10
  CHECK(BoundedSlowdown(0, 0) == 1.0);
}

TEST_CASE("summary metrics over a hand-made replay", "[sim][metrics]") {
  SimResult r;
  r.capacity = 4;
  r.resource = "cpu";
  r.jobs.push_back(Done("a", 4, 0, 0, 100));     // wait 0
  r.jobs.push_back(Done("b", 2, 10, 100, 100));  // wait 90
  JobOutcome never;
  never.account = "c";
  never.infeasible = "too big";
  r.jobs.push_back(never);
  Metrics m = ComputeMetrics(r);
  CHECK(m.jobs == 3);
  CHECK(m.finished == 2);
  CHECK(m.infeasible == 1);
  CHECK(m.mean_wait_s == 45);
  CHECK(m.max_wait_s == 90);
  CHECK(m.makespan_s == 200);
  CHECK(m.mean_bounded_slowdown == Approx((1.0 + 1.9) / 2));
  CHECK(m.utilization == Approx((4.0 * 100 + 2.0 * 100) / (4.0 * 200)));
  REQUIRE(m.accounts.size() == 2);
  CHECK(m.accounts[0].usage_share == Approx(400.0 / 600));
  CHECK(m.accounts[1].share == Approx(0.5));
  // x = usage/share = (4/3, 2/3): J = (2)^2 / (2 * (16/9 + 4/9)) = 0.9
  CHECK(m.jain_fairness == Approx(0.9));
  // Shares from the policy: a is entitled to 2/3, b to 1/3 -> perfectly fair.
  Metrics fair = ComputeMetrics(r, {{"a", 2}, {"b", 1}});
  CHECK(fair.jain_fairness == Approx(1.0));
}
