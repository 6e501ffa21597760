// Validation against published results on the filtered KTH-SP2 and SDSC-SP2 traces (see
// tests/data/traces/README.md): mean bounded slowdown (tau = 10 s) within 3% of the SC'15
// artifact / pyss reference figures. Each case replays a whole trace (labelled "slow").
#include <catch2/catch.hpp>

#include "schedd/sim/sim_config.h"
#include "test_util.h"

using namespace mlsched::sim;

namespace {

Metrics ReplayTrace(const std::string& trace, const std::string& backfill, bool exact) {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/" + trace;
  c.backfill = backfill;
  c.exact_runtimes = exact;
  auto r = RunReplay(c);
  REQUIRE(r.metrics.finished == r.metrics.jobs);
  return r.metrics;
}

void CheckWithin(double got, double published, double tolerance) {
  INFO("mean bounded slowdown " << got << ", published " << published);
  CHECK(got == Approx(published).epsilon(tolerance));
}

}  // namespace

TEST_CASE("KTH-SP2 FCFS without backfill", "[sim][validation]") {
  CheckWithin(ReplayTrace("KTH-SP2.input.swf.gz", "none", false).mean_bounded_slowdown, 6814.97, 0.03);
}

TEST_CASE("SDSC-SP2 FCFS without backfill", "[sim][validation]") {
  CheckWithin(ReplayTrace("SDSC-SP2.input.swf.gz", "none", false).mean_bounded_slowdown, 13823.53,
              0.03);
}
