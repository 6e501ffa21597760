// Multifactor priority, fairshare (hand-computed from the formulas in Slurm's
// priority_multifactor and fair_tree documentation), usage accrual, and limits.
#include <catch2/catch.hpp>

#include <cmath>

#include "schedd/core/fairshare.h"
#include "schedd/core/limits.h"
#include "schedd/core/priority.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// Accounts A (60 shares) and B (40); users A/u1, A/u2, B/u3 with 1 share each; usage 30/10/60.
PolicySet TwoAccounts(FairshareAlgorithm algorithm) {
  PolicySet p;
  p.fairshare.algorithm = algorithm;
  AccountPolicy a;
  a.name = "A";
  a.shares = 60;
  a.user_shares = {{"u1", 1}, {"u2", 1}};
  AccountPolicy b;
  b.name = "B";
  b.shares = 40;
  b.user_shares = {{"u3", 1}};
  p.accounts = {a, b};
  return p;
}
const std::map<std::string, double> kUsage{{"A/u1", 30}, {"A/u2", 10}, {"B/u3", 60}};

}  // namespace

namespace {
// A QoS with priority and limits; preemption settings at their defaults.
QosPolicy MakeQos(const std::string& name, int64_t priority, Duration max_wall, int64_t max_gpus_per_job,
                  int64_t max_gpus_per_user, int32_t max_running_jobs_per_user) {
  QosPolicy q;
  q.name = name;
  q.priority = priority;
  q.max_wall = max_wall;
  q.max_gpus_per_job = max_gpus_per_job;
  q.max_gpus_per_user = max_gpus_per_user;
  q.max_running_jobs_per_user = max_running_jobs_per_user;
  return q;
}
}  // namespace

TEST_CASE("classic fairshare: F = 2^(-UE/S) with Slurm's effective usage", "[core][fairshare]") {
  FairshareTree tree(TwoAccounts(FairshareAlgorithm::kClassic), kUsage, {});
  // UE_A = 0.4 + (1 - 0.4) * 0.6 = 0.76;  UE_B = 0.6 + (1 - 0.6) * 0.4 = 0.76
  // u1: S = 0.3, UE = 0.3 + (0.76 - 0.3) * 0.5 = 0.53 -> 2^(-0.53/0.3)
  // u2: S = 0.3, UE = 0.1 + (0.76 - 0.1) * 0.5 = 0.43 -> 2^(-0.43/0.3)
  // u3: S = 0.4, UE = 0.6 + (0.76 - 0.6) * 1.0 = 0.76 -> 2^(-0.76/0.4)
  CHECK(tree.Factor("A", "u1") == Approx(std::exp2(-0.53 / 0.3)));
  CHECK(tree.Factor("A", "u2") == Approx(std::exp2(-0.43 / 0.3)));
  CHECK(tree.Factor("B", "u3") == Approx(std::exp2(-0.76 / 0.4)));
  CHECK(tree.Factor("A", "u2") > tree.Factor("A", "u1"));
  bool saw_a = false;
  for (const FairshareRow& r : tree.rows())
    if (r.key == "A") {
      saw_a = true;
      CHECK(r.norm_shares == Approx(0.6));
      CHECK(r.norm_usage == Approx(0.4));
      CHECK(r.effective_usage == Approx(0.76));
    }
  CHECK(saw_a);
}

TEST_CASE("Fair Tree ranks by level fairshare S/U, depth first", "[core][fairshare]") {
  FairshareTree tree(TwoAccounts(FairshareAlgorithm::kFairTree), kUsage, {});
  // Level fairshare: A 0.6/0.4 = 1.5 > B 0.4/0.6; in A: u2 0.5/0.25 = 2 > u1 0.5/0.75.
  // Visit order u2, u1, u3: ranks 3, 2, 1 of 3 users.
  CHECK(tree.Factor("A", "u2") == Approx(1.0));
  CHECK(tree.Factor("A", "u1") == Approx(2.0 / 3));
  CHECK(tree.Factor("B", "u3") == Approx(1.0 / 3));
}

TEST_CASE("no usage at all gives every user factor 1", "[core][fairshare]") {
  for (auto alg : {FairshareAlgorithm::kClassic, FairshareAlgorithm::kFairTree}) {
    FairshareTree tree(TwoAccounts(alg), {}, {});
    CHECK(tree.Factor("A", "u1") == Approx(1.0));
    CHECK(tree.Factor("B", "u3") == Approx(1.0));
  }
}

TEST_CASE("a parent cycle, accounts only the jobs or the usage name, and users of no account", "[core][fairshare]") {
  // C and D name each other as parent (a loop the policy loader refuses, the core survives); job
  // accounts E and "" and usage of account F alone are not in the policy.
  PolicySet p = TwoAccounts(FairshareAlgorithm::kClassic);
  AccountPolicy c, d;
  c.name = "C";
  c.parent = "D";
  c.user_shares = {{"u4", 2}};
  d.name = "D";
  d.parent = "C";
  p.accounts.push_back(c);
  p.accounts.push_back(d);
  const Job e = JobBuilder(1).Account("E").User("u5").Build();
  const Job none = JobBuilder(2).Account("").User("u6").Build();
  std::map<std::string, double> usage = kUsage;
  usage["C/u4"] = 20;
  usage["F"] = 5;
  for (auto alg : {FairshareAlgorithm::kClassic, FairshareAlgorithm::kFairTree}) {
    p.fairshare.algorithm = alg;
    FairshareTree tree(p, usage, {e, none});
    std::map<std::string, FairshareRow> rows;
    for (const FairshareRow& r : tree.rows()) rows[r.key] = r;
    for (const char* key : {"A", "B", "C", "D", "E", "F", "A/u1", "C/u4", "E/u5", "/u6"}) CHECK(rows.count(key));
    CHECK(rows.size() == 12);  // and A/u2, B/u3; F has no users
    CHECK((rows["C"].parent.empty() || rows["D"].parent.empty()));  // the loop is cut
    CHECK(rows["C/u4"].parent == "C");
    CHECK(rows["C/u4"].raw_shares == 2);
    CHECK(rows["/u6"].parent.empty());
    // Factor() finds every user by (account, user), its row's factor
    for (auto [account, user] : std::vector<std::pair<std::string, std::string>>{
             {"A", "u1"}, {"C", "u4"}, {"E", "u5"}, {"", "u6"}}) {
      INFO(account << "/" << user);
      CHECK(tree.Factor(account, user) == rows[UsageKey(account, user)].factor);
      CHECK(tree.Factor(account, user) >= 0);
      CHECK(tree.Factor(account, user) <= 1);
    }
    CHECK(tree.Factor("A", "nobody") == 1.0);
    CHECK(tree.Factor("nowhere", "u1") == 1.0);
  }
}

TEST_CASE("usage decays with the half-life and accrues billing-weighted seconds", "[core][fairshare]") {
  FairsharePolicy fs;
  fs.half_life = 100;
  fs.billing_weights = {{"gpu", 1.0}, {"gpu:h100", 2.0}};
  std::map<std::string, double> usage{{"A/u1", 100}};
  std::vector<Job> jobs{JobBuilder(1).Account("A").User("u1").GpusPerTask(2).GpuTypes({"h100"})
                            .Running(50, Allocation{}).Build(),
                        JobBuilder(2).Account("B").User("u3").GpusPerTask(1, "l4").Running(0, Allocation{}).Build()};
  AccrueUsage(usage, jobs, fs, 0, 100);
  CHECK(usage["A/u1"] == Approx(100 * 0.5 + 2 * 2.0 * 50));  // decayed, plus 50 s of 2 h100 at 2.0
  CHECK(usage["B/u3"] == Approx(1 * 1.0 * 100));              // "gpu" fallback weight
  AccrueUsage(usage, {}, fs, 100, 300);                       // two half-lives, nothing running
  CHECK(usage["B/u3"] == Approx(25));
}

TEST_CASE("multifactor priority is the weighted sum of [0,1] factors minus nice", "[core][priority]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("gpu-[1-4]").Gpus("h100", 8).Build();  // 32 GPUs
  PolicySet p;
  p.weights = {1000, 2000, 500, 100, 300, 1000, false};
  p.partitions = {MakePartition("low"), MakePartition("high")};
  p.partitions[0].priority_tier = 1;
  p.partitions[1].priority_tier = 2;
  p.default_partition = "low";
  p.qos = {MakeQos("normal", 10, 0, 0, 0, 0), MakeQos("urgent", 20, 0, 0, 0, 0)};
  s.jobs = {JobBuilder(1).Tasks(1).GpusPerTask(8).Submit(0).Nice(5).Build()};
  PriorityCalculator calc(s, p, 250);
  PriorityBreakdown b = calc.Compute(s.jobs[0]);
  CHECK(b.age == Approx(0.25));
  CHECK(b.fairshare == Approx(1.0));
  CHECK(b.job_size == Approx(0.25));
  CHECK(b.partition == Approx(0.5));
  CHECK(b.qos == Approx(0.5));
  CHECK(b.priority == 250 + 2000 + 125 + 50 + 150 - 5);
  p.weights.favor_small = true;
  CHECK(PriorityCalculator(s, p, 250).Compute(s.jobs[0]).job_size == Approx(0.75));
  p.weights.max_age = 100;  // age capped at PriorityMaxAge
  CHECK(PriorityCalculator(s, p, 250).Compute(s.jobs[0]).age == Approx(1.0));
}

TEST_CASE("multifactor order: a light user's later job goes first", "[core][priority]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("a100", 8).Build();
  PolicySet p = TwoAccounts(FairshareAlgorithm::kClassic);
  p.queue_order = QueueOrder::kMultifactor;
  p.weights.fairshare = 10000;
  s.usage = kUsage;
  s.jobs = {JobBuilder(1).Account("B").User("u3").GpusPerTask(8).Submit(0).Build(),
            JobBuilder(2).Account("A").User("u2").GpusPerTask(8).Submit(10).Build()};
  CyclePlan plan = RunChecked(s, p, 20);
  CHECK(StartedIds(plan) == std::vector<JobId>{2});
  CHECK(PendingOf(plan, 1).priority == std::llround(10000 * std::exp2(-0.76 / 0.4)));
  CHECK(PendingOf(plan, 1).reason == PendingReason::kResources);
}

TEST_CASE("limits hold jobs back with the reason naming the limit", "[core][limits]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("gpu-[1-4]").Gpus("h100", 8).Build();
  PolicySet p;
  AccountPolicy research;
  research.name = "research";
  research.max_gpus = 12;
  AccountPolicy vision;
  vision.name = "vision";
  vision.parent = "research";
  AccountPolicy nlp;
  nlp.name = "nlp";
  nlp.parent = "research";
  nlp.max_running_jobs = 1;
  p.accounts = {research, vision, nlp};
  p.qos = {MakeQos("normal", 0, 3600, 16, 0, 0), MakeQos("small", 0, 0, 0, 2, 0)};
  p.partitions[0].max_tasks_per_job = 2;
  s.jobs = {JobBuilder(1).Account("vision").GpusPerTask(8).Running(0, Allocation{{Task(0, "gpu-1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100", 1000)}}).Build()};
  struct Row { const char* what; Job job; PendingReason reason; std::string detail; };
  std::vector<Row> table{
      {"inherited account GPU quota", JobBuilder(2).Account("nlp").GpusPerTask(8).Build(), PendingReason::kAccountQuota,
       "account 'research' max_gpus 12 (running 8, job 8)"},
      {"QoS wall time", JobBuilder(2).Account("nlp").TimeLimit(2h).Build(), PendingReason::kQosLimit, "QoS 'normal' max_wall 3600 s"},
      {"QoS GPUs per job", JobBuilder(2).Account("x").Tasks(2).GpusPerTask(16).Build(), PendingReason::kQosLimit,
       "QoS 'normal' max_gpus_per_job 16"},
      {"QoS GPUs per user", JobBuilder(2).Account("x").Qos("small").GpusPerTask(3).Build(), PendingReason::kQosLimit,
       "QoS 'small' user 'alice' max_gpus_per_user 2 (running 0, job 3)"},
      {"unknown QoS", JobBuilder(2).Qos("vip").Build(), PendingReason::kQosLimit, "unknown QoS 'vip'"},
      {"partition tasks per job", JobBuilder(2).Account("x").Tasks(3).Build(), PendingReason::kPartitionLimit,
       "partition 'default' max_tasks_per_job 2"},
  };
  for (const Row& row : table) {
    SECTION(row.what) {
      ClusterState w = s;
      w.jobs.push_back(row.job);
      CyclePlan plan = RunChecked(w, p, 0);
      CHECK(plan.starts.empty());
      CHECK(PendingOf(plan, 2).reason == row.reason);
      if (!row.detail.empty()) CHECK(PendingOf(plan, 2).detail == row.detail);
    }
  }
  SECTION("jobs started in the same cycle count against the quota") {
    s.jobs.push_back(JobBuilder(2).Account("nlp").GpusPerTask(1).Build());
    s.jobs.push_back(JobBuilder(3).Account("nlp").GpusPerTask(1).Build());
    CyclePlan plan = RunChecked(s, p, 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{2});
    CHECK(PendingOf(plan, 3).reason == PendingReason::kAccountQuota);
    CHECK(PendingOf(plan, 3).detail == "account 'nlp' max_running_jobs 1 (running 1, job 1)");
  }
}
