// Validation against published results on the filtered KTH-SP2 and SDSC-SP2 traces (see
// tests/data/traces/README.md): mean bounded slowdown (tau = 10 s) of the SC'15 artifact (EASY)
// and the pyss reference simulator (FCFS, conservative). Each case replays a whole trace through
// the real scheduling core (labelled "slow": about 1-7 s each).
#include <catch2/catch.hpp>

#include <cmath>

#include "schedd/sim/sim_config.h"
#include "schedd/sim/start_estimates.h"
#include "test_util.h"

using namespace mlsched::sim;

namespace {

const char* const kKth = "KTH-SP2.input.swf.gz";
const char* const kSdsc = "SDSC-SP2.input.swf.gz";

Metrics ReplayTrace(const std::string& trace, const std::string& backfill, bool exact,
                    const std::string& order = "queue", bool keep_plans = false) {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/" + trace;
  c.backfill = backfill;
  c.backfill_order = order;
  c.exact_runtimes = exact;
  c.keep_plans = keep_plans;
  auto r = RunReplay(c);
  REQUIRE(r.metrics.finished == r.metrics.jobs);
  return r.metrics;
}

void CheckWithin(const Metrics& m, double published, double tolerance) {
  INFO("mean bounded slowdown " << m.mean_bounded_slowdown << ", published " << published);
  CHECK(m.mean_bounded_slowdown == Approx(published).epsilon(tolerance));
}

}  // namespace

TEST_CASE("KTH-SP2 FCFS without backfill", "[sim][validation]") {
  CheckWithin(ReplayTrace(kKth, "none", false), 6814.97, 0.03);
}

TEST_CASE("SDSC-SP2 FCFS without backfill", "[sim][validation]") {
  CheckWithin(ReplayTrace(kSdsc, "none", false), 13823.53, 0.03);
}

TEST_CASE("KTH-SP2 FCFS + EASY, user estimates", "[sim][validation]") {
  Metrics m = ReplayTrace(kKth, "easy", false);
  CheckWithin(m, 92.58, 0.03);
  CHECK(m.mean_wait_s == Approx(6837).epsilon(0.03));
  CHECK(m.utilization == Approx(0.6856).epsilon(0.01));
}

TEST_CASE("SDSC-SP2 FCFS + EASY, user estimates", "[sim][validation]") {
  Metrics m = ReplayTrace(kSdsc, "easy", false);
  CheckWithin(m, 87.87, 0.03);
  CHECK(m.mean_wait_s == Approx(20498).epsilon(0.03));
  CHECK(m.utilization == Approx(0.8229).epsilon(0.01));
}

TEST_CASE("KTH-SP2 FCFS + EASY, exact run times", "[sim][validation]") {
  CheckWithin(ReplayTrace(kKth, "easy", true), 71.72, 0.01);
}

TEST_CASE("SDSC-SP2 FCFS + EASY, exact run times", "[sim][validation]") {
  CheckWithin(ReplayTrace(kSdsc, "easy", true), 70.48, 0.01);
}

TEST_CASE("KTH-SP2 conservative, exact run times", "[sim][validation]") {
  CheckWithin(ReplayTrace(kKth, "conservative", true), 67.12, 0.01);
}

TEST_CASE("SDSC-SP2 conservative, exact run times", "[sim][validation]") {
  CheckWithin(ReplayTrace(kSdsc, "conservative", true), 66.83, 0.01);
}

TEST_CASE("KTH-SP2 EASY with shortest-job-first backfill order", "[sim][validation]") {
  CheckWithin(ReplayTrace(kKth, "easy", false, "shortest-first"), 69.41, 0.03);
}

TEST_CASE("SDSC-SP2 EASY with shortest-job-first backfill order", "[sim][validation]") {
  CheckWithin(ReplayTrace(kSdsc, "easy", false, "shortest-first"), 84.89, 0.03);
}

// pyss's conservative scheduler keeps every reservation between events and, when a job ends
// early, moves the queued jobs one by one to their earliest slot around all other reservations,
// never later than before (compression). The simulator feeds each PendingUpdate::expected_start
// back into the next cycle and the core keeps those plans (BackfillPolicy::keep_plans, --keep-plans).
// Hidden tag: both run as the one ctest sim/validation/conservative_user_estimates_vs_pyss.
TEST_CASE("KTH-SP2 conservative, user estimates, kept plans", "[.conservative-pyss][sim][validation]") {
  CheckWithin(ReplayTrace(kKth, "conservative", false, "queue", true), 89.00, 0.03);
}

TEST_CASE("SDSC-SP2 conservative, user estimates, kept plans", "[.conservative-pyss][sim][validation]") {
  CheckWithin(ReplayTrace(kSdsc, "conservative", false, "queue", true), 89.66, 0.03);
}

// Beyond the classics: a policy under schedd/sim/policies gives at least 20% lower mean bounded
// slowdown than FCFS + EASY on the trace without raising the maximum wait by more than 10%.
namespace {
void CheckBeatsEasy(const std::string& trace, const std::string& policy) {
  const Metrics easy = ReplayTrace(trace, "easy", false);
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/" + trace;
  c.policy_path = std::string(MLSCHED_SIM_POLICY_DIR) + "/" + policy;
  const Metrics better = RunReplay(c).metrics;
  INFO("EASY " << easy.mean_bounded_slowdown << " / max wait " << easy.max_wait_s << "; " << policy << " "
               << better.mean_bounded_slowdown << " / " << better.max_wait_s);
  CHECK(better.finished == better.jobs);
  CHECK(better.mean_bounded_slowdown <= 0.8 * easy.mean_bounded_slowdown);
  CHECK(better.max_wait_s <= 1.1 * easy.max_wait_s);
}
}  // namespace

TEST_CASE("KTH-SP2 fairshare-nudged order beats FCFS + EASY", "[sim][validation]") {
  CheckBeatsEasy(kKth, "fairshare-age.toml");
}

TEST_CASE("SDSC-SP2 fairshare-nudged shortest-first order beats FCFS + EASY", "[sim][validation]") {
  CheckBeatsEasy(kSdsc, "fairshare-sjf-slow-decay.toml");
}

// The shipped policies (issue 15, point 2): multifactor priority, EASY, and the starvation guard
// reserve_after (wide jobs: reserve_after_wide over wide_fraction of the machine), chosen on the
// first half of each trace only (schedd/sim/README.md "One default policy"). Whole traces, pinned
// (±0.5%), mean bounded slowdown and max wait against FCFS + EASY (92.69 / 262,194 s on KTH-SP2,
// 87.81 / 459,740 s on SDSC-SP2):
//   default.toml (48h; wide 36h over 0.75): KTH-SP2 44.95, 309,143 s (1.18x; goal <= 51.4 at
//     <= 1.25x); SDSC-SP2 63.82, 455,043 s (0.99x; goal <= 65.0 at <= 1.25x).
//   fairness-first.toml (48h; wide 24h over 0.5): KTH-SP2 47.54, 263,788 s (1.01x); SDSC-SP2
//     64.95, 455,043 s (0.99x) (goal: <= 1.10x and at least 25% below EASY's slowdown).
// The guard of the last stop (36h for every job) gave 45.14 / 73.97; no guard 43.87 / 44.29 at
// 2.08x / 1.84x EASY's longest wait.
namespace {
// `easy`: FCFS + EASY on the same trace, replayed once by the caller.
void CheckShippedPolicy(const std::string& trace, const Metrics& easy, const std::string& file, double bsld,
                        double max_wait_ratio, double max_wait_bound, double bsld_bound) {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/" + trace;
  c.policy_path = std::string(MLSCHED_POLICIES_DIR) + "/" + file;
  const Metrics m = RunReplay(c).metrics;
  INFO("EASY " << easy.mean_bounded_slowdown << " / max wait " << easy.max_wait_s << "; " << file << " "
               << m.mean_bounded_slowdown << " / " << m.max_wait_s);
  CHECK(m.finished == m.jobs);
  CHECK(m.mean_bounded_slowdown == Approx(bsld).epsilon(0.005));
  CHECK(m.max_wait_s <= max_wait_bound * easy.max_wait_s);
  CHECK(m.max_wait_s / easy.max_wait_s == Approx(max_wait_ratio).epsilon(0.005));
  CHECK(m.mean_bounded_slowdown <= bsld_bound);
}
void CheckDefaultPolicy(const std::string& trace, double bsld, double max_wait_ratio, double goal) {
  CheckShippedPolicy(trace, ReplayTrace(trace, "easy", false), "default.toml", bsld, max_wait_ratio, 1.25, goal);
}
void CheckFairnessFirst(const std::string& trace, double bsld, double max_wait_ratio) {
  const Metrics easy = ReplayTrace(trace, "easy", false);
  CheckShippedPolicy(trace, easy, "fairness-first.toml", bsld, max_wait_ratio, 1.10, 0.75 * easy.mean_bounded_slowdown);
}
}  // namespace

TEST_CASE("KTH-SP2 default policy: half EASY's slowdown within 1.25x its max wait", "[sim][validation]") {
  CheckDefaultPolicy(kKth, 44.95, 309143.0 / 262194.0, 51.4);
}

TEST_CASE("KTH-SP2 fairness-first policy: within 1.10x EASY's max wait at least 25 percent below its slowdown",
          "[sim][validation]") {
  CheckFairnessFirst(kKth, 47.54, 263788.0 / 262194.0);
}

TEST_CASE("SDSC-SP2 fairness-first policy: within 1.10x EASY's max wait at least 25 percent below its slowdown",
          "[sim][validation]") {
  CheckFairnessFirst(kSdsc, 64.95, 455043.0 / 459740.0);
}

TEST_CASE("SDSC-SP2 default policy: at or beyond SC'15's best slowdown below EASY's max wait", "[sim][validation]") {
  CheckDefaultPolicy(kSdsc, 63.82, 455043.0 / 459740.0, 65.0);
}

// Start-time estimates users can trust (issue 15, point 3): conservative backfill plans every
// pending job; the start it plans at submission (and 1 h later) is compared with the actual start.
// Time-limit planning (Slurm's way) against planning with predicted run times (Tsafrir's mean of
// the user's last two, --predict-runtimes). Figures measured at 0a7caa0 and pinned (±0.5%); the
// goal "median error at least 2x lower" holds on SDSC-SP2 (4.5x) with the paper's predictor, and
// on KTH-SP2 (1.75x; 1.98x with doubling corrections) with history by request and doubling
// corrections (2.18x; chosen on the trace's first half, where it is 2.09x).
namespace {
StartEstimateMetrics ReplayEstimates(const std::string& trace, bool predict, bool shadow = false,
                                     const std::string& correction = "", const std::string& history_by = "",
                                     int64_t max_jobs = 0) {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/" + trace;
  c.backfill = "conservative";
  c.predict_runtimes = predict;
  c.predict_correction = correction;
  c.predict_history_by = history_by;
  c.max_jobs = max_jobs;
  c.estimate_with_predictions = shadow;
  auto r = RunReplay(c);
  REQUIRE(r.metrics.finished == r.metrics.jobs);
  const StartEstimateMetrics m = ComputeStartEstimates(r.result);
  // Conservative backfill gives every pending job a planned start.
  CHECK(m.at_submit.estimated == m.at_submit.pending);
  CHECK(m.after_recheck.estimated == m.after_recheck.pending);
  return m;
}

void CheckAccuracy(const EstimateAccuracy& a, double median, double within_15m, double within_1h) {
  INFO("median |error| " << a.median_abs_error_s << " s, within 15 min " << a.within_15m
                         << ", within 1 h " << a.within_1h);
  CHECK(a.median_abs_error_s == Approx(median).epsilon(0.005));
  CHECK(a.within_15m == Approx(within_15m).epsilon(0.005));
  CHECK(a.within_1h == Approx(within_1h).epsilon(0.005));
}
}  // namespace

TEST_CASE("KTH-SP2 start-time estimates: time limits vs predicted run times", "[sim][validation]") {
  const StartEstimateMetrics limits = ReplayEstimates(kKth, false);
  const StartEstimateMetrics predicted = ReplayEstimates(kKth, true);
  CheckAccuracy(limits.at_submit, 5797, 0.1784, 0.3900);
  CheckAccuracy(predicted.at_submit, 3309, 0.2668, 0.5201);
  CheckAccuracy(limits.after_recheck, 7295, 0.1492, 0.3319);
  CheckAccuracy(predicted.after_recheck, 5249, 0.1772, 0.4104);
  // Time-limit estimates are pessimistic (jobs start early); predicted ones are unbiased.
  CHECK(limits.at_submit.median_error_s < -5000);
  CHECK(std::abs(predicted.at_submit.median_error_s) < 600);
  // The same schedule as time-limit planning, estimated by a shadow pass with predictions.
  const StartEstimateMetrics shadow = ReplayEstimates(kKth, false, true);
  CheckAccuracy(shadow.at_submit, 3963, 0.2293, 0.4787);
  CHECK(shadow.at_submit.pending == limits.at_submit.pending);
  // Doubling corrections (a job that outlives its prediction is predicted twice its elapsed time):
  // 1.98x lower than time limits, still short of 2x.
  const StartEstimateMetrics doubling = ReplayEstimates(kKth, true, false, "doubling");
  CheckAccuracy(doubling.at_submit, 2923, 0.2885, 0.5431);
  CheckAccuracy(doubling.after_recheck, 4652, 0.1935, 0.4409);
  // With history by request too (the mean of the user's last two jobs with the same request): 2.18x.
  const StartEstimateMetrics by_request = ReplayEstimates(kKth, true, false, "doubling", "request");
  CheckAccuracy(by_request.at_submit, 2658, 0.3160, 0.5653);
  CheckAccuracy(by_request.after_recheck, 4245, 0.2246, 0.4650);
  CHECK(by_request.at_submit.median_abs_error_s * 2 <= limits.at_submit.median_abs_error_s);
  CHECK(std::abs(by_request.at_submit.median_error_s) < 600);  // unbiased
}

TEST_CASE("KTH-SP2 first half start-time estimates: history by request with doubling is 2x better", "[sim][validation]") {
  // The first 14,240 jobs (half), where the setting was chosen among {user, request} x
  // {incremental, doubling}: 3,525 s (user, doubling) vs 3,198 s (request, doubling).
  const StartEstimateMetrics limits = ReplayEstimates(kKth, false, false, "", "", 14240);
  const StartEstimateMetrics by_request = ReplayEstimates(kKth, true, false, "doubling", "request", 14240);
  CheckAccuracy(limits.at_submit, 6683, 0.1873, 0.3768);
  CheckAccuracy(by_request.at_submit, 3198, 0.2942, 0.5232);
  CHECK(by_request.at_submit.median_abs_error_s * 2 <= limits.at_submit.median_abs_error_s);
}

TEST_CASE("SDSC-SP2 start-time estimates: time limits vs predicted run times", "[sim][validation]") {
  const StartEstimateMetrics limits = ReplayEstimates(kSdsc, false);
  const StartEstimateMetrics predicted = ReplayEstimates(kSdsc, true);
  CheckAccuracy(limits.at_submit, 34868, 0.0431, 0.1178);
  CheckAccuracy(predicted.at_submit, 7707, 0.1896, 0.3631);
  CheckAccuracy(limits.after_recheck, 43350, 0.0300, 0.0698);
  CheckAccuracy(predicted.after_recheck, 11584, 0.1077, 0.2608);
  CHECK(predicted.at_submit.median_abs_error_s * 2 <= limits.at_submit.median_abs_error_s);
  const StartEstimateMetrics shadow = ReplayEstimates(kSdsc, false, true);
  CheckAccuracy(shadow.at_submit, 9693, 0.1390, 0.2993);
  CHECK(shadow.at_submit.pending == limits.at_submit.pending);
  const StartEstimateMetrics doubling = ReplayEstimates(kSdsc, true, false, "doubling");
  CheckAccuracy(doubling.at_submit, 7871, 0.1859, 0.3530);
  CheckAccuracy(doubling.after_recheck, 11415, 0.1079, 0.2615);
  CHECK(doubling.at_submit.median_abs_error_s * 2 <= limits.at_submit.median_abs_error_s);
  const StartEstimateMetrics by_request = ReplayEstimates(kSdsc, true, false, "doubling", "request");
  CheckAccuracy(by_request.at_submit, 7474, 0.1834, 0.3593);
  CheckAccuracy(by_request.after_recheck, 10803, 0.1085, 0.2701);
  CHECK(by_request.at_submit.median_abs_error_s * 2 <= limits.at_submit.median_abs_error_s);
}
