// The policy's [interactive] (reader and admission), the UsageBook's CPU rates and the store's
// steps (issue 32).
#include <catch2/catch.hpp>

#include <chrono>

#include "schedd/policy/policy_loader.h"
#include "schedd/server/admission.h"
#include "schedd/server/store.h"
#include "schedd/server/usage_book.h"
#include "tests/server/fixtures.h"

using mlsched::policy::ParsePolicy;
using namespace mlsched;
using namespace mlsched::server;

namespace {

const char* kTwoPartitions =
    "[[partitions]]\nname = \"default\"\ndefault_time_limit = \"1h\"\nmax_time_limit = \"1d\"\n"
    "[[partitions]]\nname = \"batch\"\ndefault_time_limit = \"4h\"\nmax_time_limit = \"7d\"\n";

v1::RunningTask Task(int64_t job, int32_t rank, int64_t cpu_usec) {
  v1::RunningTask t;
  t.set_job_id(job);
  t.set_attempt(1);
  t.set_rank(rank);
  t.set_cpu_usec(cpu_usec);
  return t;
}

v1::JobInfo Placed(int64_t job, std::vector<std::string> nodes) {
  v1::JobInfo info;
  info.set_job_id(job);
  info.set_attempt(1);
  for (size_t r = 0; r < nodes.size(); ++r) {
    auto* t = info.add_tasks();
    t->set_rank(static_cast<int32_t>(r));
    t->set_node(nodes[r]);
  }
  return info;
}

}  // namespace

TEST_CASE("[interactive] is read with its lines, errors name FILE:LINE", "[policy][interactive]") {
  auto r = ParsePolicy(std::string(kTwoPartitions) +
                           "[interactive]\npartitions = [\"default\"]\nmax_time = \"8h\"\nidle_timeout = \"1h\"\n"
                           "idle_warning = \"5m\"\nidle_cpu_below = 0.5\n",
                       "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const auto& i = r.policy->interactive;
  CHECK(i.partitions == std::vector<std::string>{"default"});
  CHECK(i.max_time == 8 * 3600);
  CHECK(i.idle_timeout == 3600);
  CHECK(i.idle_warning == 300);
  CHECK(i.idle_cpu_below == 0.5);
  CHECK(i.source.Of("max_time") == "p.toml:11");
  // Defaults: every partition, no maximum, never released.
  auto d = ParsePolicy("", "d.toml");
  CHECK(d.policy->interactive.partitions.empty());
  CHECK(d.policy->interactive.idle_timeout == 0);

  struct Row {
    std::string toml, error;
  };
  for (const Row& row : std::vector<Row>{
           {"[interactive]\npartitions = [\"gpu\"]\n", "e.toml:10:14: [interactive] partitions names 'gpu', which is not a defined partition"},
           {"[interactive]\npartitions = [\"batch\", \"batch\"]\n", "names 'batch' twice"},
           {"[interactive]\nidle_timeout = \"5m\"\nidle_warning = \"10m\"\n", "e.toml:11:16: 'idle_warning' in [interactive] must be shorter"},
           {"[interactive]\nidle_cpu_below = -1\n", "e.toml:10"},
           {"[interactive]\nmax_time = \"forever\"\n", "e.toml:10"},
           {"[interactive]\nidle = \"1h\"\n", "e.toml:10"},
       }) {
    auto e = ParsePolicy(std::string(kTwoPartitions) + row.toml, "e.toml");
    INFO(row.toml);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.ErrorText(), Catch::Contains(row.error));
  }
}

TEST_CASE("an interactive job is admitted by [interactive]: partition, max_time, one size", "[server][interactive]") {
  auto r = ParsePolicy(std::string(kTwoPartitions) + "[interactive]\npartitions = [\"default\"]\nmax_time = \"30m\"\n", "p.toml");
  REQUIRE(r.ok());
  const auto& policy = r.policy->interactive;
  const auto& def = r.policy->partitions[0];
  const auto& batch = r.policy->partitions[1];
  v1::JobSpec spec;
  spec.set_interactive(true);
  // No time asked: the partition's default (1 h) capped at max_time.
  CHECK(CheckInteractiveSpec(spec, policy, def).empty());
  CHECK(spec.time_limit_s() == 1800);
  spec.set_time_limit_s(3600);
  CHECK(CheckInteractiveSpec(spec, policy, def) ==
        "time limit 1:00:00 exceeds the maximum of interactive jobs, 30:00 (policy p.toml:11 [interactive] max_time)");
  spec.set_time_limit_s(600);
  CHECK(CheckInteractiveSpec(spec, policy, batch) ==
        "partition 'batch' takes no interactive jobs; these do: default (policy p.toml:10 [interactive] partitions)");
  v1::JobSpec elastic = spec;
  elastic.set_min_tasks(1);
  CHECK_THAT(CheckInteractiveSpec(elastic, policy, def), Catch::Contains("elastic ranges are for batch jobs"));
  v1::JobSpec array = spec;
  array.set_array("0-3");
  CHECK_THAT(CheckInteractiveSpec(array, policy, def), Catch::Contains("cannot be a job array"));
  // Batch jobs are not its business.
  v1::JobSpec plain;
  plain.set_time_limit_s(86400);
  CHECK(CheckInteractiveSpec(plain, policy, batch).empty());
}

TEST_CASE("the usage book turns heartbeats into CPU use, per node that holds the rank", "[server][interactive]") {
  using Clock = UsageBook::Clock;
  UsageBook book;
  const auto t0 = Clock::now();
  v1::Heartbeat hb;
  *hb.add_running() = Task(7, 0, 1'000'000);
  *hb.add_running() = Task(7, 1, 0);
  book.Observe("a", hb, t0);
  CHECK_FALSE(book.Cpu(Placed(7, {"a", "a"})).has_value());  // one sample: no rate yet
  hb.mutable_running(0)->set_cpu_usec(3'000'000);  // 2 CPU-seconds in 2 s
  hb.mutable_running(1)->set_cpu_usec(500'000);    // 0.5 in 2 s
  book.Observe("a", hb, t0 + std::chrono::seconds(2));
  auto use = book.Cpu(Placed(7, {"a", "a"}));
  REQUIRE(use.has_value());
  CHECK(use->tasks_measured == 2);
  CHECK(use->cores == Approx(1.25));
  // An agent speaks for its own tasks: rank 1 placed on b is not counted from a's report.
  use = book.Cpu(Placed(7, {"a", "b"}));
  REQUIRE(use.has_value());
  CHECK(use->tasks_measured == 1);
  CHECK(use->cores == Approx(1.0));
  // Another attempt of the job is not this one.
  v1::JobInfo later = Placed(7, {"a", "a"});
  later.set_attempt(2);
  CHECK_FALSE(book.Cpu(later).has_value());
  // A counter that went back (a new cgroup) restarts the rate; a task no longer listed is dropped.
  v1::Heartbeat next;
  *next.add_running() = Task(7, 0, 10);
  book.Observe("a", next, t0 + std::chrono::seconds(3));
  CHECK_FALSE(book.Cpu(Placed(7, {"a", "a"})).has_value());
  // A heartbeat without cpu_usec (an old agent, no cgroup) measures nothing; a forgotten node neither.
  v1::Heartbeat bare;
  bare.add_running()->set_job_id(7);
  book.Observe("a", bare, t0 + std::chrono::seconds(4));
  CHECK_FALSE(book.Cpu(Placed(7, {"a"})).has_value());
  book.Observe("a", hb, t0 + std::chrono::seconds(5));
  book.ForgetNode("a");
  CHECK_FALSE(book.Cpu(Placed(7, {"a", "a"})).has_value());
}

TEST_CASE("the store keeps steps by job, across reopen", "[store][steps]") {
  testing::TempDir dir;
  {
    SqliteStore s(dir.path.string());
    StepRow r;
    r.job_id = 12;
    r.step_id = 0;
    r.name = "python";
    r.ntasks = 2;
    r.nodes = "a,b";
    r.uid = 65534;
    r.user = "nobody";
    r.state = "RUNNING";
    r.start_time = 100;
    s.SaveStep(r).get();
    r.state = "FAILED";
    r.exit_code = 3;
    r.end_time = 160;
    r.cpu_usec = 2'500'000;  // what its tasks' processes used (getrusage)
    r.max_rss_bytes = 300 << 20;
    s.SaveStep(r).get();  // the end replaces the start
    r.cpu_usec = r.max_rss_bytes = -1;
    r.step_id = 1;
    r.state = "COMPLETED";
    r.exit_code = 0;
    s.SaveStep(r).get();
    r.job_id = 13;
    s.SaveStep(r).get();
  }
  SqliteStore s(dir.path.string());
  auto steps = s.LoadSteps({12}, 100);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].step_id == 0);
  CHECK(steps[0].state == "FAILED");
  CHECK(steps[0].exit_code == 3);
  CHECK(steps[0].end_time == 160);
  CHECK(steps[0].nodes == "a,b");
  CHECK(steps[0].user == "nobody");
  CHECK(steps[0].cpu_usec == 2'500'000);
  CHECK(steps[0].max_rss_bytes == 300 << 20);
  CHECK(steps[1].state == "COMPLETED");
  CHECK(steps[1].cpu_usec == -1);  // unknown stays unknown
  CHECK(s.LoadSteps({12, 13}, 100).size() == 3);
  CHECK(s.LoadSteps({12, 13}, 2).size() == 2);  // the limit holds across jobs
  CHECK(s.LoadSteps({14}, 100).empty());
}
