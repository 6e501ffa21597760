// Golden determinism: the same trace, policy and seed give byte-identical reports.
#include <catch2/catch.hpp>

#include <sstream>

#include "schedd/sim/report.h"
#include "schedd/sim/sim_config.h"
#include "test_util.h"

using namespace mlsched::sim;

namespace {
std::string Render(const SimConfig& c) {
  Replay r = RunReplay(c);
  std::ostringstream out;
  WriteJson(out, r.info, r.result, r.metrics);
  WriteTable(out, r.info, r.result, r.metrics);
  WriteJobsCsv(out, r.result);
  return out.str();
}
}  // namespace

TEST_CASE("same trace + policy + seed -> byte-identical output (KTH-SP2)", "[sim][golden]") {
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/KTH-SP2.input.swf.gz";
  const std::string first = Render(c);
  CHECK(first.size() > 28481 * 20);
  CHECK(Render(c) == first);
}

TEST_CASE("same GPU trace + spot evictions + seed -> byte-identical output", "[sim][golden]") {
  const std::string cluster = testing::WriteTemp("spot.toml",
                                                 "[[nodes]]\n"
                                                 "prefix = \"od\"\ncount = 8\ncpus = 32\n"
                                                 "gpus = 4\ngpu_type = \"v100\"\n"
                                                 "[[nodes]]\n"
                                                 "prefix = \"spot\"\ncount = 8\ncpus = 32\n"
                                                 "gpus = 4\ngpu_type = \"a100\"\npool = \"spot\"\n"
                                                 "eviction_rate_per_hour = 0.02\n"
                                                 "recovery_s = 900\n");
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/pollux-workload-1.csv";
  c.app_runtimes_path = testing::WriteTemp(
      "apps.toml", "cifar10 = 3600\ndeepspeech2 = 7200\nncf = 900\nbert = 5400\n"
                   "imagenet = 43200\nyolov3 = 14400\n");
  c.cluster_path = cluster;
  c.checkpoint_interval_s = 1800;
  c.seed = 42;
  const std::string first = Render(c);
  CHECK(Render(c) == first);
  c.seed = 43;
  CHECK(Render(c) != first);
}
