// mlq's table, --format codes and widths, and --json shape.
#include <catch2/catch.hpp>

#include "cli/job_format.h"
#include "tests/cli/hostile_text.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

constexpr int64_t kNow = 1'700'000'000;

v1::JobInfo PendingJob() {
  v1::JobInfo j;
  j.set_job_id(12);
  j.set_user("alice");
  j.set_uid(1000);
  j.set_state(v1::PENDING);
  j.set_reason("Resources");
  j.set_submit_time(kNow - 100);
  auto* s = j.mutable_spec();
  s->set_name("train-resnet50");
  s->set_ntasks(4);
  s->set_cpu_millis_per_task(1500);
  s->set_account("research");
  s->set_partition("gpu");
  s->set_time_limit_s(3600);
  s->set_gpus_per_task(2);
  s->add_gpu_types("h100");
  return j;
}

v1::JobInfo RunningJob() {
  v1::JobInfo j = PendingJob();
  j.set_state(v1::RUNNING);
  j.set_reason("None");
  j.set_start_time(kNow - 3725);
  j.set_attempt(1);
  const char* nodes[] = {"gpu-02", "gpu-01", "gpu-02", "gpu-03"};
  for (int r = 0; r < 4; ++r) {
    auto* t = j.add_tasks();
    t->set_rank(r);
    t->set_node(nodes[r]);
  }
  return j;
}

std::vector<FormatItem> Format(const std::string& f) {
  auto r = ParseJobFormat(f);
  INFO(r.error);
  REQUIRE(r);
  return *r.value;
}

}  // namespace

TEST_CASE("the default table has squeue's columns", "[cli][format]") {
  auto f = Format(kDefaultJobFormat);
  CHECK(FormatJobHeader(f) == "     JOBID         NAME     USER    ACCOUNT      STATE       TIME  TASKS NODELIST(REASON)");
  CHECK(FormatJobLine(f, PendingJob(), kNow) ==
        "        12 train-resnet    alice   research    PENDING       0:00      4 (Resources)");
  CHECK(FormatJobLine(f, RunningJob(), kNow) ==
        "        12 train-resnet    alice   research    RUNNING    1:02:05      4 gpu-[01-03]");
}

TEST_CASE("widths: '.' right-justifies, a bare width left-justifies, both truncate", "[cli][format]") {
  v1::JobInfo j = PendingJob();
  CHECK(FormatJobLine(Format("%.8j|"), j, kNow) == "train-re|");
  CHECK(FormatJobLine(Format("%8u|"), j, kNow) == "alice   |");
  CHECK(FormatJobLine(Format("%.8u|"), j, kNow) == "   alice|");
  CHECK(FormatJobLine(Format("%j"), j, kNow) == "train-resnet50");
  CHECK(FormatJobHeader(Format("%.2t %5i %%")) == "ST JOBID %");
  CHECK(FormatJobLine(Format("%.2t %5i %%"), j, kNow) == "PD 12    %");
  CHECK(FormatJobLine(Format("id=%i,state=%T"), j, kNow) == "id=12,state=PENDING");
}

TEST_CASE("every field code", "[cli][format]") {
  v1::JobInfo r = RunningJob();
  r.mutable_spec()->set_qos("high");
  r.mutable_spec()->set_memory_bytes_per_task(int64_t{8} << 30);
  r.mutable_spec()->set_workdir("/w");
  r.mutable_spec()->set_nice(5);
  r.set_priority(1234.4);
  auto f = [&](char c) { return JobField(c, r, kNow); };
  CHECK(f('i') == "12");
  CHECK(f('j') == "train-resnet50");
  CHECK(f('u') == "alice");
  CHECK(f('a') == "research");
  CHECK(f('P') == "gpu");
  CHECK(f('q') == "high");
  CHECK(f('T') == "RUNNING");
  CHECK(f('t') == "R");
  CHECK(f('M') == "1:02:05");
  CHECK(f('l') == "1:00:00");
  CHECK(f('L') == "0:00");  // over its limit: nothing left
  CHECK(f('D') == "3");
  CHECK(f('A') == "4");
  CHECK(f('C') == "6");
  CHECK(f('m') == "8G");
  CHECK(f('b') == "gpu:h100:2");
  CHECK(f('R') == "gpu-[01-03]");
  CHECK(f('N') == "gpu-[01-03]");
  CHECK(f('r') == "None");
  CHECK(f('S') == FormatTimestamp(kNow - 3725));
  CHECK(f('V') == FormatTimestamp(kNow - 100));
  CHECK(f('e') == "N/A");
  CHECK(f('Q') == "1234");
  CHECK(f('Z') == "/w");
  CHECK(f('y') == "5");
  CHECK(f('o') == "N/A");  // a summary: no argv, no script
  v1::JobInfo p = PendingJob();
  p.mutable_spec()->set_time_limit_s(0);
  p.set_expected_start(kNow + 60);
  CHECK(JobField('l', p, kNow) == "UNLIMITED");
  CHECK(JobField('S', p, kNow) == FormatTimestamp(kNow + 60));  // expected start while pending
  CHECK(JobField('D', p, kNow) == "0");
  CHECK(JobField('N', p, kNow).empty());
}

TEST_CASE("time used: 0:00 pending, elapsed running, run time once finished", "[cli][format]") {
  v1::JobInfo j = RunningJob();
  CHECK(ElapsedSeconds(PendingJob(), kNow) == 0);
  CHECK(ElapsedSeconds(j, kNow) == 3725);
  j.set_state(v1::COMPLETED);
  j.set_end_time(kNow - 3600);
  CHECK(ElapsedSeconds(j, kNow) == 125);
  CHECK(JobField('R', j, kNow) == "gpu-[01-03]");  // finished jobs show where they ran
  j.clear_tasks();
  j.set_reason("Cancelled");
  CHECK(JobField('R', j, kNow) == "(Cancelled)");  // never placed
}

TEST_CASE("bad format strings are refused with the code", "[cli][format]") {
  auto r = ParseJobFormat("%i %Y");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error, Catch::StartsWith("unknown field code '%Y' in format '%i %Y'"));
  CHECK_FALSE(ParseJobFormat("%.10"));
  CHECK_FALSE(ParseJobFormat("%"));
}

TEST_CASE("JSON objects carry snake_case keys with Unix-second times", "[cli][format]") {
  auto j = JobJson(RunningJob(), kNow);
  for (const char* key : {"job_id", "name", "user", "account", "partition", "state", "reason", "tasks", "nodes",
                          "submit_time", "start_time", "end_time", "exit_code", "attempt", "time_limit"})
    CHECK(j.contains(key));
  CHECK(j["job_id"] == 12);
  CHECK(j["name"] == "train-resnet50");
  CHECK(j["state"] == "RUNNING");
  CHECK(j["state_code"] == "R");
  CHECK(j["tasks"] == 4);
  CHECK(j["nodes"] == nlohmann::json::array({"gpu-02", "gpu-01", "gpu-03"}));  // rank order
  CHECK(j["nodelist"] == "gpu-[01-03]");
  CHECK(j["submit_time"] == kNow - 100);
  CHECK(j["start_time"] == kNow - 3725);
  CHECK(j["end_time"] == 0);
  CHECK(j["elapsed"] == 3725);
  CHECK(j["exit_code"] == 0);
  CHECK(j["attempt"] == 1);
  CHECK(j["cpu_millis_per_task"] == 1500);
  CHECK(j["gpu_types"] == nlohmann::json::array({"h100"}));
  CHECK(j["submit_time"].is_number_integer());
  auto p = JobJson(PendingJob(), kNow);
  CHECK(p["nodes"].is_array());
  CHECK(p["nodes"].empty());
  CHECK(p["reason"] == "Resources");
}

TEST_CASE("cores print exactly", "[cli][format]") {
  CHECK(FormatCores(2000) == "2");
  CHECK(FormatCores(1500) == "1.5");
  CHECK(FormatCores(250) == "0.25");
  CHECK(FormatCores(1) == "0.001");
  CHECK(FormatCores(4096500) == "4096.5");
}

TEST_CASE("array elements show as ARRAY_TASK, dependencies as %E", "[cli][format]") {
  v1::JobInfo e = PendingJob();
  e.set_job_id(15);
  e.mutable_spec()->mutable_array_index()->set_array_job_id(12);
  e.mutable_spec()->mutable_array_index()->set_task_id(3);
  e.mutable_spec()->set_dependency("afterok:9");
  CHECK(JobField('i', e, kNow) == "12_3");
  CHECK(JobField('F', e, kNow) == "12");
  CHECK(JobField('K', e, kNow) == "3");
  CHECK(JobField('E', e, kNow) == "afterok:9");
  CHECK(JobIdText(PendingJob()) == "12");
  CHECK(JobField('K', PendingJob(), kNow) == "N/A");
  CHECK(JobField('E', PendingJob(), kNow) == "(null)");
  auto j = JobJson(e, kNow);
  CHECK(j["job_id"] == 15);
  CHECK(j["array_job_id"] == 12);
  CHECK(j["array_task_id"] == 3);
  CHECK(j["dependency"] == "afterok:9");
  CHECK(JobJson(PendingJob(), kNow)["array_task_id"].is_null());
}

TEST_CASE("pool, accelerator and preemption/eviction counts", "[cli][format]") {
  v1::JobInfo r = RunningJob();
  r.set_pools("on-demand,spot");
  r.set_accelerator("a100");
  r.set_preempt_count(2);
  r.set_evictions(1);
  CHECK(JobField('g', r, kNow) == "on-demand,spot");
  CHECK(JobField('G', r, kNow) == "a100");
  CHECK(JobField('w', r, kNow) == "2/1");
  CHECK(JobField('g', PendingJob(), kNow) == "N/A");
  auto j = JobJson(r, kNow);
  CHECK(j["pools"] == "on-demand,spot");
  CHECK(j["preempt_count"] == 2);
  CHECK(j["evictions"] == 1);
}

TEST_CASE("a container job's image and, once pulled, its digest", "[cli][format][container]") {
  v1::JobInfo r = RunningJob();
  CHECK(JobField('I', r, kNow) == "N/A");
  CHECK(JobField('J', r, kNow) == "N/A");
  CHECK(JobJson(r, kNow)["image_digest"].is_null());
  r.mutable_spec()->mutable_container()->set_image("docker://registry.local:5000/team/train:1");
  CHECK(JobField('I', r, kNow) == "docker://registry.local:5000/team/train:1");
  CHECK(JobField('J', r, kNow) == "N/A");  // not pulled yet
  r.set_image_digest("sha256:ef47386b595ec1fa9c98a3ef16e85a4b0db4ebe1fccb16b67594feeb219ffe89");
  CHECK(JobField('J', r, kNow) == "sha256:ef47386b595e");
  CHECK(JobJson(r, kNow)["image_digest"] == r.image_digest());
  CHECK(FormatJobLine(Format("%.20J|%I"), r, kNow) == " sha256:ef47386b595e|docker://registry.local:5000/team/train:1");
}

TEST_CASE("an elastic gang's TASKS shows the running size and the range", "[cli][format][elastic]") {
  auto f = Format("%A %C");
  v1::JobInfo pending = PendingJob();
  pending.mutable_spec()->set_min_tasks(2);
  CHECK(FormatJobLine(f, pending, kNow) == "2-4 6");
  pending.mutable_spec()->set_task_step(2);
  CHECK(FormatJobLine(f, pending, kNow) == "2-4:2 6");
  v1::JobInfo running = RunningJob();
  running.mutable_spec()->set_min_tasks(2);
  running.mutable_tasks()->RemoveLast();  // runs with 3 of its 2-4
  CHECK(FormatJobLine(f, running, kNow) == "3/2-4 4.5");
  CHECK(FormatJobLine(f, RunningJob(), kNow) == "4 6");  // rigid: unchanged
  auto j = JobJson(running, kNow);
  CHECK(j["tasks"] == 3);
  CHECK(j["task_range"] == nlohmann::json{{"min", 2}, {"max", 4}, {"step", 1}});
  CHECK(JobJson(RunningJob(), kNow)["task_range"].is_null());
}

namespace {

// A job whose every free-text field, as schedd returns it, is kHostile.
v1::JobInfo HostileJob() {
  using testing::kHostile;
  v1::JobInfo j = RunningJob();
  j.set_user(kHostile);
  j.set_reason(kHostile);
  j.set_pools(kHostile);
  j.set_accelerator(kHostile);
  j.mutable_tasks(0)->set_node(kHostile);
  auto* s = j.mutable_spec();
  for (auto* field : {s->mutable_name(), s->mutable_account(), s->mutable_partition(), s->mutable_qos(),
                      s->mutable_workdir(), s->mutable_dependency()})
    *field = kHostile;
  s->add_gpu_types(kHostile);
  s->add_argv(kHostile);
  return j;
}

}  // namespace

TEST_CASE("mlq escapes control bytes, C1 and invalid UTF-8 in every field of a line", "[cli][format][security]") {
  using testing::Inert;
  using testing::kHostileEscaped;
  const v1::JobInfo j = HostileJob();
  v1::JobInfo pending = j;
  pending.set_state(v1::PENDING);
  for (char code : std::string("ijuaPqTtMlLDACmbRNrSVeQZyoFKEgGw")) {
    const auto f = Format(std::string("%") + code);
    INFO(code);
    CHECK(Inert(FormatJobLine(f, j, kNow)));
    CHECK(Inert(FormatJobLine(f, pending, kNow)));
  }
  for (const char* code : {"%j", "%u", "%a", "%P", "%q", "%r", "%Z", "%E", "%g", "%G", "%o"})
    CHECK_THAT(FormatJobLine(Format(code), j, kNow), Catch::Contains(kHostileEscaped));
  CHECK_THAT(FormatJobLine(Format("%R"), pending, kNow), Catch::Contains("(" + kHostileEscaped + ")"));
  CHECK_THAT(FormatJobLine(Format("%N"), j, kNow), Catch::Contains(kHostileEscaped));
  CHECK_THAT(FormatJobLine(Format("%b"), j, kNow), Catch::Contains(kHostileEscaped));
  const std::string line = FormatJobLine(Format(kDefaultJobFormat), j, kNow);
  CHECK(Inert(line));
  CHECK_THAT(line, Catch::StartsWith("        12 \\x1b]0;pwned "));  // 12 characters of the escaped name
  std::string out;
  AppendJobLine(out, Format(kDefaultJobFormat), j, kNow);
  CHECK(out == line + "\n");
}

TEST_CASE("widths count characters: names in other languages are padded and cut whole", "[cli][format]") {
  v1::JobInfo j = PendingJob();
  j.mutable_spec()->set_name("训练模型任务");
  CHECK(FormatJobLine(Format("%.4j|"), j, kNow) == "训练模型|");
  CHECK(FormatJobLine(Format("%8j|"), j, kNow) == "训练模型任务  |");
  CHECK(FormatJobLine(Format("%.8j|"), j, kNow) == "  训练模型任务|");
  CHECK(FormatJobLine(Format("%j"), j, kNow) == "训练模型任务");
}

TEST_CASE("a listed job's command: argv, (batch script), or N/A when the listing carries neither", "[cli][format]") {
  v1::JobInfo j = PendingJob();  // ListJobs summaries carry no argv and no script
  CHECK(JobField('o', j, kNow) == "N/A");
  j.mutable_spec()->set_script("#!/bin/sh\ntrue\n");
  CHECK(JobField('o', j, kNow) == "(batch script)");
  j.mutable_spec()->add_argv("python");
  j.mutable_spec()->add_argv("train.py");
  CHECK(JobField('o', j, kNow) == "python train.py");
}

TEST_CASE("mlq --json stays valid JSON with control bytes, C1 and invalid UTF-8 in names", "[cli][format][security]") {
  using testing::kHostile;
  const v1::JobInfo j = HostileJob();
  CHECK_THROWS(JobJson(j, kNow).dump());  // nlohmann refuses invalid UTF-8 by default: mlq died here
  const v1::JobInfo* jobs[] = {&j, &j};
  const std::string out = FormatJobsJson({jobs[0], jobs[1]}, kNow);
  CHECK(testing::Inert(out));
  CHECK_THAT(out, Catch::Contains(R"("name":"\u001b]0;pwned\u0007\u001b[2J\r\n\u009b0m)" "\xef\xbf\xbd" "训\""));
  const auto parsed = nlohmann::json::parse(out);
  REQUIRE(parsed.is_array());
  REQUIRE(parsed.size() == 2);
  std::string name = kHostile;
  name.replace(name.find('\xff'), 1, "\xef\xbf\xbd");  // U+FFFD for the invalid byte
  CHECK(parsed[0]["name"] == name);
  CHECK(parsed[1]["reason"] == name);
  CHECK(FormatJobsJson({}, kNow) == "[]\n");
}
