// QoS preemption: victim choice scenario tables and a steady-state check (no preemption loop).
#include <catch2/catch.hpp>

#include <algorithm>

#include "schedd/core/preemption.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// "high" may preempt "low"; low jobs are exempt for `exempt` seconds and preempted at most
// `max_preemptions` times.
PolicySet QosPolicySet(Duration exempt = 0, int32_t max_preemptions = 0) {
  PolicySet p;
  QosPolicy low;
  low.name = "low";
  low.preempt_exempt_time = exempt;
  low.max_preemptions = max_preemptions;
  low.grace_time = 45;
  QosPolicy high;
  high.name = "high";
  high.preempt = {"low"};
  p.qos = {low, high};
  p.default_qos = "low";
  return p;
}

Job RunningLow(JobId id, Allocation a, Timestamp start, Timestamp last_checkpoint = 0) {
  Job j = JobBuilder(id).Tasks(static_cast<int32_t>(a.tasks.size())).GpusPerTask(a.tasks[0].gpu_indices.size())
              .Qos("low").Running(start, a).Build();
  j.last_checkpoint = last_checkpoint;
  return j;
}

std::vector<JobId> Victims(const CyclePlan& plan) {
  std::vector<JobId> v;
  for (const auto& d : plan.preemptions) v.push_back(d.victim);
  return v;
}

}  // namespace

TEST_CASE("preemption: the victim with the least work since its checkpoint is chosen", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
  s.jobs = {RunningLow(1, Allocation{{Task(0, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 0),         // 1000 s lost
            RunningLow(2, Allocation{{Task(0, "n2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 0, 900),    // 100 s lost
            JobBuilder(3).GpusPerTask(8).Qos("high").Submit(990).Build()};
  CyclePlan plan = RunChecked(s, QosPolicySet(), 1000);
  CHECK(plan.starts.empty());  // it starts once the victim has exited
  REQUIRE(Victims(plan) == std::vector<JobId>{2});
  CHECK(plan.preemptions[0].preemptor == 3);
  CHECK(plan.preemptions[0].grace == 45);
  CHECK(plan.preemptions[0].lost_work == 100);
  CHECK(plan.preemptions[0].mode == PreemptMode::kRequeue);
  CHECK(PendingOf(plan, 3).reason == PendingReason::kPreempting);
}

TEST_CASE("preemption: the youngest-first baseline ignores checkpoints", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
  s.jobs = {RunningLow(1, Allocation{{Task(0, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 100, 990),  // 10 s lost
            RunningLow(2, Allocation{{Task(0, "n2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 400),       // 600 s lost
            JobBuilder(3).GpusPerTask(8).Qos("high").Submit(990).Build()};
  PolicySet p = QosPolicySet();
  CHECK(Victims(RunChecked(s, p, 1000)) == std::vector<JobId>{1});
  p.victim_order = VictimOrder::kYoungestFirst;
  CyclePlan plan = RunChecked(s, p, 1000);
  REQUIRE(Victims(plan) == std::vector<JobId>{2});
  CHECK(plan.preemptions[0].lost_work == 600);
}

TEST_CASE("preemption: whole gangs only, and victims that turn out unneeded are dropped", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
  // Gang 1 holds 4 GPUs on each node (expensive: never checkpointed); job 2 holds 4 on n1 (cheap).
  s.jobs = {RunningLow(1, Allocation{{Task(0, "n1", {0, 1, 2, 3}, "h100"), Task(1, "n2", {0, 1, 2, 3}, "h100")}}, 0),
            RunningLow(2, Allocation{{Task(0, "n1", {4, 5, 6, 7}, "h100")}}, 0, 990),
            JobBuilder(3).GpusPerTask(8).Qos("high").Submit(999).Build()};
  CyclePlan plan = RunChecked(s, QosPolicySet(), 1000);
  // Job 2 alone frees only 4 GPUs on n1; gang 1 frees 8 on n2, so job 2 is not needed after all.
  CHECK(Victims(plan) == std::vector<JobId>{1});
}

TEST_CASE("preemption: exempt time, max preemptions and unpreemptable QoS are respected", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("h100", 8).Build();
  s.jobs = {RunningLow(1, Allocation{{Task(0, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 700),
            JobBuilder(3).GpusPerTask(8).Qos("high").Submit(999).Build()};
  SECTION("running for less than PreemptExemptTime") {
    CyclePlan plan = RunChecked(s, QosPolicySet(600), 1000);  // ran 300 s of the 600 s exemption
    CHECK(plan.preemptions.empty());
    CHECK(PendingOf(plan, 3).reason == PendingReason::kResources);
  }
  SECTION("already preempted max_preemptions times") {
    s.jobs[0].preempt_count = 2;
    CHECK(RunChecked(s, QosPolicySet(0, 2), 1000).preemptions.empty());
    s.jobs[0].preempt_count = 1;
    CHECK(Victims(RunChecked(s, QosPolicySet(0, 2), 1000)) == std::vector<JobId>{1});
  }
  SECTION("a QoS the preemptor may not preempt") {
    s.jobs[0].spec.qos = "high";
    CHECK(RunChecked(s, QosPolicySet(), 1000).preemptions.empty());
  }
}

TEST_CASE("preemption: no victim when the preemptor would still not fit", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
  Job unpreemptable = JobBuilder(1).GpusPerTask(8).Qos("high").Running(0, Allocation{{Task(0, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}).Build();
  s.jobs = {unpreemptable, RunningLow(2, Allocation{{Task(0, "n2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 0),
            JobBuilder(3).Tasks(2).GpusPerTask(8).Qos("high").Submit(999).Build()};
  CyclePlan plan = RunChecked(s, QosPolicySet(), 1000);
  CHECK(plan.preemptions.empty());  // freeing n2 alone cannot host a 2-node gang: job 2 keeps running
  CHECK(PendingOf(plan, 3).reason == PendingReason::kResources);
}

TEST_CASE("preemption: jobs already being preempted are waited for, not preempted again", "[core][preempt]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
  s.jobs = {RunningLow(1, Allocation{{Task(0, "n1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 0),
            RunningLow(2, Allocation{{Task(0, "n2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}, 0),
            JobBuilder(3).GpusPerTask(8).Qos("high").Submit(999).Build(),
            JobBuilder(4).GpusPerTask(8).Qos("high").Submit(999).Build()};
  s.jobs[0].preempting = true;  // signalled for job 3 in an earlier cycle
  CyclePlan plan = RunChecked(s, QosPolicySet(), 1000);
  CHECK(Victims(plan) == std::vector<JobId>{2});  // job 4 needs its own victim; job 3 waits for job 1
  CHECK(plan.preemptions[0].preemptor == 4);
  CHECK(PendingOf(plan, 3).reason == PendingReason::kPreempting);
}

TEST_CASE("preemption: competing QoS reach a steady state without a preemption loop", "[core][preempt]") {
  // 2 nodes; four long low jobs submitted first, then two high jobs. Victims are requeued at once
  // (as if they exited 75 immediately) and keep their submit time, so under FIFO they are older
  // than the preemptors: only the QoS tier keeps the preemptors ahead of them.
  for (QueueOrder order : {QueueOrder::kFifo, QueueOrder::kMultifactor}) {
    ClusterState s;
    s.nodes = ClusterBuilder().Nodes("n[1-2]").Gpus("h100", 8).Build();
    for (JobId id = 1; id <= 4; ++id)
      s.jobs.push_back(JobBuilder(id).GpusPerTask(8).Qos("low").Submit(id).TimeLimit(100000s).Build());
    for (JobId id = 5; id <= 6; ++id)
      s.jobs.push_back(JobBuilder(id).GpusPerTask(8).Qos("high").Submit(200 + id).TimeLimit(100000s).Build());
    PolicySet policy = QosPolicySet();
    policy.queue_order = order;
    policy.backfill.mode = BackfillMode::kEasy;
    int preemptions = 0;
    Timestamp now = 0;
    for (int cycle = 0; cycle < 50; ++cycle, now += 10) {
      ClusterState visible = s;  // jobs submitted later are not there yet
      std::erase_if(visible.jobs, [&](const Job& j) { return j.state == JobState::kPending && j.submit_time > now; });
      CyclePlan plan = RunChecked(visible, policy, now);
      ApplyPlan(s, plan, now);
      for (const PreemptDecision& d : plan.preemptions) {
        ++preemptions;
        for (Job& j : s.jobs)
          if (j.id == d.victim) {
            j.state = JobState::kPending;
            j.allocation.reset();
            j.preempt_count += 1;
          }
      }
    }
    INFO("order " << (order == QueueOrder::kFifo ? "fifo" : "multifactor"));
    CHECK(preemptions == 2);  // one victim per high job, then nothing moves
    for (const Job& j : s.jobs)
      if (j.spec.qos == "high") CHECK(j.state == JobState::kRunning);
  }
}

TEST_CASE("preemption tiers follow the preempt lists", "[core][preempt]") {
  PolicySet p;
  QosPolicy a, b, c;
  a.name = "scavenger";
  b.name = "normal";
  b.preempt = {"scavenger"};
  c.name = "critical";
  c.preempt = {"normal", "scavenger"};
  p.qos = {a, b, c};
  auto tiers = QosTiers(p);
  CHECK(tiers["scavenger"] == 0);
  CHECK(tiers["normal"] == 1);
  CHECK(tiers["critical"] == 2);
}
