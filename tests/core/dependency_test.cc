// Job dependencies (after, afterany, afterok, afternotok, singleton) and job arrays (--array with a
// "%N" throttle): parsing, evaluation tables and cycles.
#include <catch2/catch.hpp>

#include <random>

#include "schedd/core/dependency.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;
using Kind = DependencyStatus::Kind;

TEST_CASE("dependency syntax parses like sbatch --dependency", "[core][dependency]") {
  DependencyRequest r;
  REQUIRE_FALSE(ParseDependency("afterok:12:13_2,afterany:14,singleton", &r));
  REQUIRE(r.terms.size() == 3);
  CHECK_FALSE(r.any);
  CHECK(r.terms[0].type == DependencyType::kAfterOk);
  CHECK(r.terms[0].jobs == std::vector<JobRef>{{12, std::nullopt}, {13, 2}});
  CHECK(r.terms[1].type == DependencyType::kAfterAny);
  CHECK(r.terms[2].type == DependencyType::kSingleton);
  CHECK(r.terms[2].jobs.empty());
  REQUIRE_FALSE(ParseDependency("afterok:1?afternotok:2", &r));
  CHECK(r.any);
  CHECK(r.terms.size() == 2);
  REQUIRE_FALSE(ParseDependency("after:7", &r));
  CHECK(r.terms[0].type == DependencyType::kAfter);
}

TEST_CASE("bad dependency text names what is wrong", "[core][dependency]") {
  DependencyRequest r;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"", "empty dependency"},
      {"afterok", "needs job ids"},
      {"afterok:", "bad job id ''"},
      {"afterok:x1", "bad job id 'x1'"},
      {"afterok:0", "bad job id '0'"},
      {"afterok:-3", "bad job id '-3'"},
      {"aftercorr:3", "unknown dependency type 'aftercorr'"},
      {"afterok:1,afterany:2?after:3", "mixes ','"},
      {"singleton:4", "takes no job ids"},
      {"afterok:1,,afterok:2", "empty term"},
      {"afterok:1_x", "bad job id '1_x'"}};
  for (const auto& [text, want] : cases) {
    INFO(text);
    auto err = ParseDependency(text, &r);
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains(want));
  }
}

TEST_CASE("array syntax parses like sbatch --array", "[core][array]") {
  ArrayRequest a;
  REQUIRE_FALSE(ParseArray("0-99%10", 1000, &a));
  CHECK(a.task_ids.size() == 100);
  CHECK(a.task_ids.front() == 0);
  CHECK(a.task_ids.back() == 99);
  CHECK(a.max_running == 10);
  REQUIRE_FALSE(ParseArray("1,3,5-11:3,3", 1000, &a));
  CHECK(a.task_ids == std::vector<int32_t>{1, 3, 5, 8, 11});
  CHECK(a.max_running == 0);
  REQUIRE_FALSE(ParseArray("7", 1000, &a));
  CHECK(a.task_ids == std::vector<int32_t>{7});
}

TEST_CASE("bad array text names what is wrong", "[core][array]") {
  ArrayRequest a;
  const std::vector<std::pair<std::string, std::string>> cases{
      {"", "empty --array"},
      {"%4", "empty --array"},
      {"0-9%0", "bad --array limit '%0'"},
      {"0-9%x", "bad --array limit"},
      {"9-0", "ends before it starts"},
      {"0-9:0", "bad --array item '0-9:0'"},
      {"3:2", "bad --array item '3:2'"},
      {"a-b", "bad --array item 'a-b'"},
      {"0-1000", "more than 1000 elements"},
      {"0,5-2000000", "above the largest allowed"}};
  for (const auto& [text, want] : cases) {
    INFO(text);
    auto err = ParseArray(text, 1000, &a);
    REQUIRE(err);
    CHECK_THAT(*err, Catch::Contains(want));
  }
}

TEST_CASE("overlapping array items count with their overlaps so they cannot multiply the work", "[core][array][fuzz]") {
  // Found by the submit fuzz target: "5-551551" repeated in one --array made mlsub insert half a
  // million ids per repetition (each within the limit on its own) and time out.
  ArrayRequest a;
  auto err = ParseArray("0-9,5-14", 15, &a);
  REQUIRE(err);
  CHECK_THAT(*err, Catch::Contains("more than 15 elements"));
  REQUIRE_FALSE(ParseArray("0-9,5-14", 20, &a));
  CHECK(a.task_ids.size() == 15);  // duplicates still appear once
  CHECK(a.task_ids.back() == 14);
  err = ParseArray("75,5-551551,5-551551,5-551551", kMaxArrayTaskId + 1, &a);
  REQUIRE(err);
  CHECK_THAT(*err, Catch::Contains("makes more than 1000000 elements"));
}

TEST_CASE("each dependency type against each state of the job it names", "[core][dependency]") {
  struct Row {
    DependencyType type;
    JobState target;
    Kind want;
  };
  const std::vector<Row> table{
      {DependencyType::kAfter, JobState::kPending, Kind::kWaiting},
      {DependencyType::kAfter, JobState::kRunning, Kind::kSatisfied},
      {DependencyType::kAfter, JobState::kCancelled, Kind::kSatisfied},
      {DependencyType::kAfterAny, JobState::kRunning, Kind::kWaiting},
      {DependencyType::kAfterAny, JobState::kFailed, Kind::kSatisfied},
      {DependencyType::kAfterAny, JobState::kCompleted, Kind::kSatisfied},
      {DependencyType::kAfterOk, JobState::kPending, Kind::kWaiting},
      {DependencyType::kAfterOk, JobState::kRunning, Kind::kWaiting},
      {DependencyType::kAfterOk, JobState::kCompleted, Kind::kSatisfied},
      {DependencyType::kAfterOk, JobState::kFailed, Kind::kNever},
      {DependencyType::kAfterOk, JobState::kCancelled, Kind::kNever},
      {DependencyType::kAfterOk, JobState::kTimeout, Kind::kNever},
      {DependencyType::kAfterNotOk, JobState::kRunning, Kind::kWaiting},
      {DependencyType::kAfterNotOk, JobState::kCompleted, Kind::kNever},
      {DependencyType::kAfterNotOk, JobState::kFailed, Kind::kSatisfied},
      {DependencyType::kAfterNotOk, JobState::kTimeout, Kind::kSatisfied},
  };
  for (const Row& row : table) {
    INFO(DependencyTypeName(row.type) << " on " << JobStateName(row.target));
    ClusterState s;
    if (IsFinal(row.target)) {
      s.omitted[5] = row.target;
    } else {
      Job target = JobBuilder(5).Build();
      target.state = row.target;
      s.jobs.push_back(target);
    }
    const JobSpec spec = JobBuilder(6).DependsOn(row.type, {5}).Build().spec;
    CHECK(EvaluateDependencies(spec, JobStateIndex(s)).kind == row.want);
  }
}

TEST_CASE("',' needs every term, '?' any one, a purged job counts as satisfied", "[core][dependency]") {
  ClusterState s;
  s.omitted = {{1, JobState::kCompleted}, {2, JobState::kFailed}};
  s.jobs = {JobBuilder(3).Running(0, {}).Build()};
  const JobStateIndex index(s);
  auto eval = [&](JobBuilder b) { return EvaluateDependencies(b.Build().spec, index); };
  using T = DependencyType;
  CHECK(eval(JobBuilder(9).DependsOn(T::kAfterOk, {1, 99})).kind == Kind::kSatisfied);  // 99 purged
  CHECK(eval(JobBuilder(9).DependsOn(T::kAfterOk, {1}).DependsOn(T::kAfterAny, {3})).kind == Kind::kWaiting);
  auto never = eval(JobBuilder(9).DependsOn(T::kAfterOk, {2}).DependsOn(T::kAfterAny, {3}));
  CHECK(never.kind == Kind::kNever);
  CHECK(never.detail == "afterok:2 (job 2 ended FAILED)");
  CHECK(eval(JobBuilder(9).DependsOn(T::kAfterOk, {2}).DependsOn(T::kAfterNotOk, {2}).DependsOnAny()).kind ==
        Kind::kSatisfied);
  auto waiting = eval(JobBuilder(9).DependsOn(T::kAfterOk, {2}).DependsOn(T::kAfterAny, {3}).DependsOnAny());
  CHECK(waiting.kind == Kind::kWaiting);
  CHECK(waiting.detail == "afterany:3 (job 3 is RUNNING)");
  CHECK(eval(JobBuilder(9).DependsOn(T::kAfterOk, {2}).DependsOn(T::kAfterNotOk, {1}).DependsOnAny()).kind ==
        Kind::kNever);
}

TEST_CASE("a job waits for its dependencies without blocking the FIFO queue", "[core][dependency]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("h100", 8).Build();
  s.jobs = {JobBuilder(1).GpusPerTask(2).Running(0, Allocation{{Task(0, "n1", {0, 1}, "h100")}}).Build(),
            JobBuilder(2).GpusPerTask(2).Submit(1).DependsOn(DependencyType::kAfterOk, {1}).Build(),
            JobBuilder(3).GpusPerTask(2).Submit(2).Build()};
  CyclePlan plan = RunChecked(s, PolicySet{}, 10);
  CHECK(StartedIds(plan) == std::vector<JobId>{3});
  CHECK(PendingOf(plan, 2).reason == PendingReason::kDependency);
  CHECK(PendingOf(plan, 2).detail == "afterok:1 (job 1 is RUNNING)");

  s.jobs.erase(s.jobs.begin());  // job 1 ends ...
  s.omitted[1] = JobState::kCompleted;
  CHECK(StartedIds(RunChecked(s, PolicySet{}, 20)) == std::vector<JobId>{2, 3});
  s.omitted[1] = JobState::kFailed;  // ... or fails: afterok never holds
  plan = RunChecked(s, PolicySet{}, 20);
  CHECK(PendingOf(plan, 2).reason == PendingReason::kDependencyNeverSatisfied);
  CHECK(PendingOf(plan, 2).detail == "afterok:1 (job 1 ended FAILED)");
}

TEST_CASE("singleton: one running job per (user, name)", "[core][dependency]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Cpus(16).Build();
  s.jobs = {JobBuilder(1).CpusPerTask(1).User("ann").Name("etl").Singleton().Build(),
            JobBuilder(2).CpusPerTask(1).User("ann").Name("etl").Singleton().Submit(1).Build(),
            JobBuilder(3).CpusPerTask(1).User("bob").Name("etl").Singleton().Submit(2).Build(),
            JobBuilder(4).CpusPerTask(1).User("ann").Name("train").Singleton().Submit(3).Build()};
  CyclePlan plan = RunChecked(s, PolicySet{}, 10);
  CHECK(StartedIds(plan) == std::vector<JobId>{1, 3, 4});
  CHECK(PendingOf(plan, 2).reason == PendingReason::kDependency);
  CHECK_THAT(PendingOf(plan, 2).detail, Catch::Contains("singleton: job 1 'etl' of user 'ann' is running"));
  ApplyPlan(s, plan, 10);
  CHECK(StartedIds(RunChecked(s, PolicySet{}, 11)).empty());
  std::erase_if(s.jobs, [](const Job& j) { return j.id == 1; });
  CHECK(StartedIds(RunChecked(s, PolicySet{}, 12)) == std::vector<JobId>{2});
}

TEST_CASE("an array's %N throttle caps its running elements, other jobs are unaffected", "[core][array]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("a100", 8).Build();
  for (int32_t t = 0; t < 10; ++t) s.jobs.push_back(JobBuilder(100 + t).GpusPerTask(1).Submit(0).ArrayElement(100, t, 3).Build());
  s.jobs.push_back(JobBuilder(200).GpusPerTask(1).Submit(5).Build());
  PolicySet policy;
  policy.backfill.mode = BackfillMode::kEasy;
  CyclePlan plan = RunChecked(s, policy, 10);
  CHECK(StartedIds(plan) == std::vector<JobId>{100, 101, 102, 200});
  CHECK(PendingOf(plan, 105).reason == PendingReason::kJobArrayTaskLimit);
  CHECK(PendingOf(plan, 105).detail == "array 100: 3 elements running, limit %3");

  // The whole array runs through with never more than 3 at once (CheckInvariants), in order.
  Replay r;
  r.state.nodes = s.nodes;
  for (const Job& j : s.jobs) r.arrivals.push_back(j);
  size_t most = 0;
  r.Run(policy, [&](const ClusterState& st, const CyclePlan&, Timestamp) {
    size_t running = 0;
    for (const Job& j : st.jobs) running += j.state == JobState::kRunning && j.spec.array.job_id == 100;
    most = std::max(most, running);
  });
  CHECK(most == 3);
  REQUIRE(r.started.size() == 11);
  for (JobId id = 101; id < 110; ++id) CHECK(r.started.at(id) >= r.started.at(id - 1));
}

TEST_CASE("random dependency chains: every job starts only after what it waits for",
          "[core][dependency][property]") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    Replay r;
    r.state.nodes = ClusterBuilder().Nodes("n[1-4]").Gpus("h100", 4).Build();
    std::map<JobId, std::pair<DependencyType, JobId>> dep;
    std::map<JobId, Duration> limit;
    for (JobId id = 1; id <= 40; ++id) {
      JobBuilder b(id);
      limit[id] = 10 + rng() % 100;
      b.GpusPerTask(1 + rng() % 4).Tasks(1 + rng() % 2).Submit(id).TimeLimit(std::chrono::seconds(limit[id]));
      if (id > 1 && rng() % 2) {
        const JobId on = 1 + rng() % (id - 1);
        const auto type = std::array{DependencyType::kAfterAny, DependencyType::kAfterOk, DependencyType::kAfter,
                                     DependencyType::kAfterNotOk}[rng() % 4];
        b.DependsOn(type, {on});
        dep[id] = {type, on};
      }
      if (rng() % 5 == 0) r.outcome[id] = JobState::kFailed;
      r.arrivals.push_back(b.Build());
    }
    PolicySet policy;
    policy.backfill.mode = seed % 2 ? BackfillMode::kEasy : BackfillMode::kConservative;
    r.Run(policy, nullptr);
    for (const auto& [id, d] : dep) {
      const auto [type, on] = d;
      INFO("job " << id << " " << DependencyTypeName(type) << ":" << on);
      if (!r.started.count(on)) {  // what it waits for never ran: neither may it (except purged)
        CHECK_FALSE(r.started.count(id));
        continue;
      }
      const bool failed = r.outcome.count(on) > 0;
      const Timestamp end = r.started.at(on) + limit.at(on);
      const bool can = type == DependencyType::kAfterOk ? !failed : type == DependencyType::kAfterNotOk ? failed : true;
      if (!can) {
        CHECK_FALSE(r.started.count(id));
      } else if (r.started.count(id)) {
        CHECK(r.started.at(id) >= (type == DependencyType::kAfter ? r.started.at(on) : end));
      }
    }
  }
}
