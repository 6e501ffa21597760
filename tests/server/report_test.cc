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
  CHECK_THAT(report::FormatCsv(r), Catch::Contains(",3.000000,3.000000,9.000000,"));
  CHECK_THAT(report::FormatJson(r), Catch::Contains("\"gpu_idle_hours\": 9.0"));
  // Attempts stored before accounting (cpu_usec -1, no GPU samples) add nothing.
  AttemptRow old = a1;
  old.cpu_usec = -1;
  old.gpu_seconds = old.gpu_busy_seconds = 0;
  const report::Report r2 = report::Build({job}, {old}, report::Pricing{}, 0, 100000, 100000);
  CHECK(r2.usage[0].cpu_used_hours == 0);
  CHECK(r2.usage[0].gpu_idle_hours == 0);
}

TEST_CASE("mlreport: spot vs on-demand GPU-hours and lost work per team, wait percentiles per partition, top idle users",
          "[report][accounting]") {
  // Three users; each job 2 GPUs. alice: 1 h on spot, evicted losing 30 min, then 2 h on-demand,
  // all busy. bob: 4 h on-demand, 3 of them idle. carol: 1 h on spot, half idle.
  auto job = [](int64_t id, const std::string& user, const std::string& account, const std::string& partition, int64_t submit) {
    JobRow j;
    j.id = id;
    j.user = user;
    j.submit_time = submit;
    mlsched::v1::JobSpec spec;
    spec.set_account(account);
    spec.set_partition(partition);
    spec.set_gpus_per_task(2);
    j.spec = spec.SerializeAsString();
    return j;
  };
  auto attempt = [](int64_t id, int32_t n, int64_t start, int64_t hours, const std::string& pool, double busy_h) {
    AttemptRow a;
    a.job_id = id;
    a.attempt = n;
    a.start_time = start;
    a.end_time = start + hours * 3600;
    a.outcome = "COMPLETED";
    a.gpus = 2;
    a.gpu_type = "h100";
    a.pool = pool;
    a.gpu_seconds = 2.0 * hours * 3600;
    a.gpu_busy_seconds = busy_h * 3600;
    return a;
  };
  AttemptRow evicted = attempt(1, 1, 1000, 1, "spot", 2);
  evicted.outcome = "Evicted";
  evicted.lost_work_s = 1800;
  // Waits of the first attempts: alice 0 s... submitted at 1000 - 600, bob 60 s, carol 3,600 s;
  // three jobs in partition "gpu": p50 = 600 s, p90 = p95 = 3,600 s (nearest rank).
  const report::Report r = report::Build(
      {job(1, "alice", "vision", "gpu", 400), job(2, "bob", "nlp", "gpu", 940), job(3, "carol", "nlp", "gpu", 1000 - 3600)},
      {evicted, attempt(1, 2, 5000, 2, "on-demand", 4), attempt(2, 1, 1000, 4, "on-demand", 2), attempt(3, 1, 1000, 1, "spot", 1)},
      report::Pricing{}, 0, 100000, 100000, 2);
  REQUIRE(r.usage.size() == 3);
  const auto& alice = r.usage[2];  // sorted by (account, user): nlp/bob, nlp/carol, vision/alice
  REQUIRE(alice.user == "alice");
  CHECK(alice.pool_gpu_hours.at("spot") == Approx(2));
  CHECK(alice.pool_gpu_hours.at("on-demand") == Approx(4));
  CHECK(alice.pool_lost_gpu_hours.at("spot") == Approx(1));  // 0.5 h x 2 GPUs
  CHECK(alice.pool_lost_gpu_hours.count("on-demand") == 0);
  REQUIRE(r.waits.size() == 1);
  CHECK(r.waits[0].jobs == 3);
  CHECK(r.waits[0].p50_wait_s == 600);
  CHECK(r.waits[0].p90_wait_s == 3600);
  CHECK(r.waits[0].p95_wait_s == 3600);
  CHECK(r.waits[0].mean_wait_s == Approx((600 + 60 + 3600) / 3.0));
  // The top 2 wasters: bob (8 - 2 = 6 idle GPU-hours), then carol (2 - 1 = 1); alice wasted none.
  REQUIRE(r.top_idle.size() == 2);
  CHECK(r.top_idle[0].user == "bob");
  CHECK(r.top_idle[0].gpu_idle_hours == Approx(6));
  CHECK(r.top_idle[1].user == "carol");
  const std::string text = report::FormatTable(r);
  CHECK_THAT(text, Catch::Contains("   1 nlp            bob             8.000      2.000      6.000   75.0\n"));
  CHECK_THAT(text, Catch::Contains("P50_WAIT"));
  CHECK_THAT(report::FormatCsv(r), Catch::Contains("top_idle,nlp,bob,"));
  CHECK_THAT(report::FormatCsv(r), Catch::Contains(",on-demand=8.000,,1\n"));
  CHECK_THAT(report::FormatJson(r), Catch::Contains("\"p50_wait_s\": 600.0"));
}
