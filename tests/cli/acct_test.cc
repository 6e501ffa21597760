// mlacct's formatting (cli/acct_format.h): sacct's field names and formats, the efficiency report
// (seff) and its verdicts, on hand-built jobs with hand-computed figures.
#include <catch2/catch.hpp>

#include "cli/acct_format.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

constexpr int64_t kNow = 1'800'000'000;

// A finished 2-task job of 4 cores, 8 GiB and 4 GPUs per task that ran 2 h.
v1::JobInfo Finished() {
  v1::JobInfo j;
  j.set_job_id(42);
  j.set_user("alice");
  j.set_state(v1::COMPLETED);
  j.set_submit_time(kNow - 3 * 3600);
  j.set_start_time(kNow - 2 * 3600);
  j.set_end_time(kNow);
  j.set_attempt(1);
  auto* s = j.mutable_spec();
  s->set_name("train");
  s->set_account("vision");
  s->set_partition("gpu");
  s->set_ntasks(2);
  s->set_cpu_millis_per_task(4000);
  s->set_memory_bytes_per_task(int64_t{8} << 30);
  s->set_gpus_per_task(4);
  for (int r = 0; r < 2; ++r) j.add_tasks()->set_rank(r);
  auto* u = j.mutable_usage();
  u->set_ranks(2);
  u->set_wall_seconds(2 * 3600);
  u->set_cpu_usec(int64_t{4} * 3600 * 1'000'000);  // 4 CPU-hours of 16 core-hours: 25 %
  u->set_max_rss_bytes(int64_t{2} << 30);           // 2 GiB of 8: 25 %
  u->set_gpu_seconds(8 * 2 * 3600.0);               // 8 GPUs x 2 h
  u->set_gpu_busy_seconds(8 * 2 * 3600.0 * 0.03);   // 3 % busy
  u->set_gpu_energy_joules(3.6e6 * 1.5);
  u->set_gpu_util_max_percent(41);
  u->set_lost_work_seconds(1800);
  u->set_cost(12.5);
  j.set_preempt_count(1);
  u->set_gpu_memory_max_bytes(int64_t{6} << 30);
  return j;
}

}  // namespace

TEST_CASE("mlacct fields: sacct's names, case-insensitive, unknown ones named", "[acct]") {
  auto f = ParseAcctFields("jobid,JOBNAME,maxrss,GPUUtil");
  REQUIRE(f);
  CHECK(*f.value == std::vector<std::string>{"JobID", "JobName", "MaxRSS", "GPUUtil"});
  auto bad = ParseAcctFields("JobID,Bogus");
  CHECK_FALSE(bad);
  CHECK_THAT(bad.error, Catch::StartsWith("unknown field 'Bogus' (known: JobID, JobName"));
  CHECK_FALSE(ParseAcctFields(","));
}

TEST_CASE("mlacct figures: TotalCPU, CPUEff, MaxRSS, MemEff, GPU hours and utilization", "[acct]") {
  const v1::JobInfo j = Finished();
  CHECK(AcctField("JobID", j, kNow) == "42");
  CHECK(AcctField("State", j, kNow) == "COMPLETED");
  CHECK(AcctField("ExitCode", j, kNow) == "0:0");
  CHECK(AcctField("Elapsed", j, kNow) == "2:00:00");
  CHECK(AcctField("AllocCPUS", j, kNow) == "8");
  CHECK(AcctField("AllocTRES", j, kNow) == "cpu=8,mem=16G,gres/gpu=8");
  CHECK(AcctField("TotalCPU", j, kNow) == "4:00:00");
  CHECK(AcctField("CPUEff", j, kNow) == "25.0%");
  CHECK(AcctField("MaxRSS", j, kNow) == "2G");
  CHECK(AcctField("MemEff", j, kNow) == "25.0%");
  CHECK(AcctField("GPUHours", j, kNow) == "16.00");
  CHECK(AcctField("GPUBusyHours", j, kNow) == "0.48");
  CHECK(AcctField("GPUHoursIdle", j, kNow) == "15.52");
  CHECK(AcctField("GPUUtil", j, kNow) == "3.0%");
  CHECK(AcctField("EnergyKWh", j, kNow) == "1.500");
  CHECK(AcctField("MaxGPUUtil", j, kNow) == "41%");
  CHECK(AcctField("LostWork", j, kNow) == "30:00");
  CHECK(AcctField("Cost", j, kNow) == "12.50");
  CHECK(AcctField("Preemptions", j, kNow) == "1");
  CHECK(AcctField("Evictions", j, kNow) == "0");
  CHECK(AcctField("MaxGPUMem", j, kNow) == "6G");
  CHECK_THAT(FormatEfficiency(j, kNow), Catch::Contains("GPU Peaks: 41 % utilization, 6G GPU memory (largest task)"));
  // A signal death is sacct's 0:SIGNAL; nothing measured leaves the usage fields blank.
  v1::JobInfo killed = Finished();
  killed.set_exit_code(128 + 9);
  killed.clear_usage();
  CHECK(AcctField("ExitCode", killed, kNow) == "0:9");
  CHECK(AcctField("TotalCPU", killed, kNow).empty());
  CHECK(AcctField("GPUUtil", killed, kNow).empty());
  CHECK(AcctField("Elapsed", killed, kNow) == "2:00:00");
  // A running job's wall time adds its attempt's now - start to the ended attempts'.
  v1::JobInfo running = Finished();
  running.set_state(v1::RUNNING);
  running.set_end_time(0);
  running.set_start_time(kNow - 600);
  running.mutable_usage()->set_wall_seconds(3600);
  CHECK(AcctWallSeconds(running, kNow) == 4200);
  CHECK(AcctField("End", running, kNow) == "Unknown");
}

TEST_CASE("mlacct table: padded with a dashed line, or sacct -P's '|', JSON numbers and nulls", "[acct]") {
  const v1::JobInfo a = Finished();
  v1::JobInfo b = Finished();
  b.set_job_id(43);
  b.clear_usage();
  const std::vector<const v1::JobInfo*> jobs{&a, &b};
  CHECK(FormatAcctTable({"JobID", "State", "GPUUtil"}, jobs, kNow, false, false) ==
        "JobID State     GPUUtil\n"
        "----- --------- -------\n"
        "42    COMPLETED 3.0%\n"
        "43    COMPLETED\n");
  CHECK(FormatAcctTable({"JobID", "State", "GPUUtil"}, jobs, kNow, true, true) == "42|COMPLETED|3.0%\n43|COMPLETED|\n");
  auto o = AcctJson({"JobID", "GPUHours", "GPUUtil", "MaxRSS"}, b, kNow);
  CHECK(o["JobID"] == "43");
  CHECK(o["GPUHours"].is_null());
  CHECK(AcctJson({"GPUHours"}, a, kNow)["GPUHours"] == 16.0);
}

TEST_CASE("mlacct --efficiency: seff's figures and a verdict on the largest waste", "[acct]") {
  const std::string r = FormatEfficiency(Finished(), kNow);
  CHECK_THAT(r, Catch::Contains("CPU Efficiency: 25.0% of 16:00:00 core-walltime"));
  CHECK_THAT(r, Catch::Contains("Memory Efficiency: 25.0% of 8G per task"));
  CHECK_THAT(r, Catch::Contains("GPU Efficiency: 3.0% busy over 16.00 GPU-hours (15.52 idle)"));
  CHECK_THAT(r, Catch::Contains("Verdict: GPU 3 % busy over 16.0 GPU-hours: consider a smaller allocation or fixing the data loader"));
  v1::JobInfo oom = Finished();
  oom.mutable_usage()->set_oom_kills(2);
  CHECK_THAT(FormatEfficiency(oom, kNow), Catch::Contains("Verdict: the kernel's OOM killer ended 2 process(es): ask for more --mem-per-task"));
  v1::JobInfo busy = Finished();
  busy.mutable_usage()->set_gpu_busy_seconds(busy.usage().gpu_seconds() * 0.9);
  CHECK_THAT(FormatEfficiency(busy, kNow), Catch::Contains("Verdict: no waste found"));  // 25 % is not below 25 %
  busy.mutable_usage()->set_cpu_usec(int64_t{3200} * 3600 * 1000);                      // 3.2 CPU-hours: 20 %
  CHECK_THAT(FormatEfficiency(busy, kNow), Catch::Contains("Verdict: CPU 20 % used: ask for fewer --cpus-per-task"));
  v1::JobInfo none = Finished();
  none.clear_usage();
  CHECK_THAT(FormatEfficiency(none, kNow), Catch::Contains("CPU Utilized: unknown"));
  CHECK_THAT(FormatEfficiency(none, kNow), Catch::Contains("Verdict: nothing measured"));
}
