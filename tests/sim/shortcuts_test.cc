// Idle-cycle shortcuts (SimOptions::idle_shortcuts: skipped idle passes, parked pending jobs)
// change no decision: every report, JSON and per-job CSV is byte-identical with them on and off.
#include <catch2/catch.hpp>

#include <sstream>

#include "schedd/sim/pending_view.h"
#include "schedd/sim/report.h"
#include "schedd/sim/sim_config.h"
#include "test_util.h"

using namespace mlsched::sim;

namespace {

std::string Render(SimConfig c, bool shortcuts) {
  c.idle_shortcuts = shortcuts;
  Replay r = RunReplay(c);
  std::ostringstream out;
  WriteJson(out, r.info, r.result, r.metrics);
  WriteTable(out, r.info, r.result, r.metrics);
  WriteJobsCsv(out, r.result);
  return out.str();
}

/// Replays `c` under each backfill mode with and without the shortcuts; returns how many passes
/// the shortcuts skipped in all (to check that they were exercised).
int64_t CheckSame(SimConfig c) {
  int64_t skipped = 0;
  for (const char* mode : {"none", "easy", "conservative"}) {
    INFO("backfill " << mode);
    c.backfill = mode;
    CHECK(Render(c, true) == Render(c, false));
    c.idle_shortcuts = true;
    skipped += RunReplay(c).result.skipped_cycles;
  }
  return skipped;
}

}  // namespace

TEST_CASE("idle shortcuts change no decision: KTH-SP2 first 2500 jobs", "[sim][shortcuts]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/KTH-SP2.input.swf.gz";
  c.max_jobs = 2500;
  c.estimates = false;
  CHECK(CheckSame(c) > 0);
  c.backfill_order = "shortest-first";
  c.predict_runtimes = true;
  CheckSame(c);
}

TEST_CASE("idle shortcuts change no decision: Philly gangs on 16 x 4 GPUs", "[sim][shortcuts]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/philly-2017-09-10.csv.gz";
  c.max_jobs = 1500;
  c.nodes = 16;
  c.gpus_per_node = 4;
  c.estimates = false;
  CHECK(CheckSame(c) > 0);
}

TEST_CASE("idle shortcuts change no decision: spot evictions requeue jobs", "[sim][shortcuts]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/pollux-workload-1.csv";
  c.app_runtimes_path = testing::WriteTemp(
      "apps.toml", "cifar10 = 3600\ndeepspeech2 = 7200\nncf = 900\nbert = 5400\n"
                   "imagenet = 43200\nyolov3 = 14400\n");
  c.cluster_path = testing::WriteTemp("spot.toml",
                                      "[[nodes]]\nprefix = \"od\"\ncount = 4\ncpus = 32\ngpus = 4\n"
                                      "[[nodes]]\nprefix = \"spot\"\ncount = 4\ncpus = 32\ngpus = 4\n"
                                      "pool = \"spot\"\neviction_rate_per_hour = 0.1\nrecovery_s = 900\n");
  c.checkpoint_interval_s = 1800;
  c.seed = 7;
  c.estimates = false;
  CheckSame(c);
}

TEST_CASE("idle shortcuts keep start-time estimates when they are recorded", "[sim][shortcuts]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/KTH-SP2.input.swf.gz";
  c.max_jobs = 2000;
  CheckSame(c);  // estimates on: only the no-backfill mode may skip or park
  for (const char* mode : {"none", "easy", "conservative"}) {
    INFO("backfill " << mode);
    c.backfill = mode;
    c.idle_shortcuts = true;
    const Replay on = RunReplay(c);
    c.idle_shortcuts = false;
    const Replay off = RunReplay(c);
    REQUIRE(on.result.jobs.size() == off.result.jobs.size());
    size_t differ = 0;
    for (size_t i = 0; i < on.result.jobs.size(); ++i)
      differ += on.result.jobs[i].estimate_at_submit != off.result.jobs[i].estimate_at_submit ||
                on.result.jobs[i].estimate_recheck != off.result.jobs[i].estimate_recheck;
    CHECK(differ == 0);
  }
}

TEST_CASE("idle shortcuts change no decision under the reserve_after starvation guard", "[sim][shortcuts]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/KTH-SP2.input.swf.gz";
  c.policy_path = std::string(MLSCHED_POLICIES_DIR) + "/default.toml";  // reserve_after = 36h
  c.max_jobs = 4000;
  c.estimates = false;
  c.queue_order = "fifo";  // where mlsim would otherwise park jobs
  CheckSame(c);
  c.queue_order = "multifactor";
  CheckSame(c);
}

TEST_CASE("EASY shape records change no decision: Philly gangs in queue and shortest-first order", "[sim][shortcuts]") {
  // Thousands of one-GPU gangs wait behind the head's reservation: most of them are parked as
  // covered by a record of their shape (PendingView), and records that start open their gaps.
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/philly-2017-09-10.csv.gz";
  c.max_jobs = 3000;
  c.nodes = 16;
  c.gpus_per_node = 4;
  c.estimates = false;
  c.backfill = "easy";
  CHECK(Render(c, true) == Render(c, false));
  c.backfill_order = "shortest-first";
  CHECK(Render(c, true) == Render(c, false));
}

TEST_CASE("PendingView shows the records of a shape and opens the gap of a record", "[sim][shortcuts]") {
  PendingView v(Need{0, 0, 4}, 1);  // 4 GPUs, a prefix of one job
  const Need one{0, 0, 1};
  // Planned run times by index: records are 0 (50), 1 (40), 3 (30) and 5 (20); 2 (60) comes
  // after 1 and 4 (30) after 3, each with a run time at least that of the record before it.
  const int64_t planned[] = {50, 40, 60, 30, 30, 20};
  for (size_t i = 0; i < 6; ++i) v.AddPending(i, one, "a", planned[i]);
  std::vector<size_t> unpark, park;
  v.Arrange(true, &unpark, &park);
  CHECK(unpark.empty());
  CHECK(park == std::vector<size_t>{2, 4});
  v.OpenGap(3, &unpark);  // record 3 started in a tentative pass: 4 must be seen
  CHECK(unpark == std::vector<size_t>{4});
  v.OpenGap(2, &unpark);  // not a record: nothing to open
  CHECK(unpark == std::vector<size_t>{4});
  // Record 1 starts: 2 (60) is still covered by record 0 (50); 4 is parked again.
  v.Started(1, one);
  v.Arrange(true, &unpark, &park);
  CHECK(unpark.empty());
  CHECK(park == std::vector<size_t>{4});
  CHECK(v.IsParked(2));
  // No GPU free: nothing fits, every job past the prefix is parked.
  v.Started(0, Need{0, 0, 3});
  v.Arrange(true, &unpark, &park);
  CHECK(park == std::vector<size_t>{3, 5});
  CHECK(!v.AnyMayStart());
}
