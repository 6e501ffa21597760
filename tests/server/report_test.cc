// mlreport's efficiency columns (schedd/report/report.h): the CPU-hours used and the GPU-hours busy
// and idle that the attempts' agents measured, each attempt's figures scaled to its part inside
// the report's period; hand-computed figures.
#include <catch2/catch.hpp>

#include "mlsched/v1/types.pb.h"
#include "schedd/report/report.h"

using namespace mlsched;
using mlsched::server::AttemptRow;
using mlsched::server::JobRow;

TEST_CASE("mlreport: CPU-hours used and GPU-hours busy and idle per account and user, clipped to the period",
          "[report][accounting]") {
  JobRow job;
  job.id = 1;
  job.user = "alice";
  mlsched::v1::JobSpec spec;
  spec.set_account("vision");
  spec.set_gpus_per_task(4);
  job.spec = spec.SerializeAsString();
  // Attempt 1 inside the period: 2 h, 4 GPUs sampled 8 GPU-h, 2 busy; 2 CPU-hours used.
  AttemptRow a1;
  a1.job_id = 1;
  a1.attempt = 1;
  a1.start_time = 10000;
  a1.end_time = 10000 + 7200;
  a1.outcome = "Evicted";
  a1.gpus = 4;
  a1.gpu_type = "h100";
  a1.cpu_millis = 8000;
  a1.cpu_usec = int64_t{7200} * 1'000'000;
  a1.gpu_seconds = 8 * 3600;
  a1.gpu_busy_seconds = 2 * 3600;
  // Attempt 2: half of it after the period's end.
  AttemptRow a2 = a1;
  a2.attempt = 2;
  a2.start_time = 20000;
  a2.end_time = 20000 + 7200;
  a2.outcome = "COMPLETED";
  const report::Report r = report::Build({job}, {a1, a2}, report::Pricing{}, 0, 20000 + 3600, 30000);
  REQUIRE(r.usage.size() == 1);
  const auto& u = r.usage[0];
  CHECK(u.account == "vision");
  CHECK(u.cpu_used_hours == Approx(2 + 1));
  CHECK(u.gpu_busy_hours == Approx(2 + 1));
  CHECK(u.gpu_idle_hours == Approx(6 + 3));
  CHECK_THAT(report::FormatCsv(r), Catch::Contains(",3.000000,3.000000,9.000000\n"));
  CHECK_THAT(report::FormatJson(r), Catch::Contains("\"gpu_idle_hours\": 9.0"));
  // Attempts stored before accounting (cpu_usec -1, no GPU samples) add nothing.
  AttemptRow old = a1;
  old.cpu_usec = -1;
  old.gpu_seconds = old.gpu_busy_seconds = 0;
  const report::Report r2 = report::Build({job}, {old}, report::Pricing{}, 0, 100000, 100000);
  CHECK(r2.usage[0].cpu_used_hours == 0);
  CHECK(r2.usage[0].gpu_idle_hours == 0);
}
