// Elastic capacity (PlanProvisioning, issue 16 point 4): requests sized to the demand that waits
// for resources, capped by max_nodes and the cost budget; idle release, resume timeout, names.
#include <catch2/catch.hpp>

#include "schedd/core/provisioning.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// One busy on-demand node (4 h100, all held by job 100), so every pending GPU job waits for resources.
ClusterState BusyCluster() {
  ClusterState s;
  s.nodes = ClusterBuilder().Pool("on-demand").Nodes("od-1").Gpus("h100", 4).Cpus(16).MemoryGiB(64).Build();
  Allocation a;
  a.tasks.push_back(Task(0, "od-1", {0, 1, 2, 3}, "h100", 1000));
  s.jobs.push_back(JobBuilder(100).GpusPerTask(4, "h100").CpusPerTask(1).TimeLimit(3600s).Running(0, a).Build());
  return s;
}

// A spot pool making nodes of 4 h100, 16 cores, 64 GiB, priced 2 per GPU-hour.
PolicySet SpotPool(int32_t max_nodes, double max_cost = 0) {
  PolicySet p;
  ProvisioningPolicy cfg;
  cfg.pool = Pool::kSpot;
  cfg.resume_program = "/usr/lib/mlsched/resume";
  cfg.suspend_program = "/usr/lib/mlsched/suspend";
  cfg.max_nodes = max_nodes;
  cfg.idle_time = 300;
  cfg.resume_timeout = 60;
  cfg.max_cost_per_hour = max_cost;
  cfg.shape = ClusterBuilder().Pool("spot").Nodes("shape").Gpus("h100", 4).Cpus(16).MemoryGiB(64).Build()[0];
  cfg.shape.name.clear();
  p.provisioning.push_back(cfg);
  p.placement.pricing["spot"].gpu_hour["h100"] = 2.0;
  return p;
}

// Runs a cycle on `s` and plans provisioning after it.
ProvisioningPlan Plan(const ClusterState& s, const PolicySet& p, const ProvisionLedger& ledger, Timestamp now) {
  return PlanProvisioning(s, RunChecked(s, p, now), p, ledger, now);
}

Node Registered(const std::string& name) {
  return ClusterBuilder().Pool("spot").Nodes(name).Gpus("h100", 4).Cpus(16).MemoryGiB(64).Build()[0];
}

}  // namespace

TEST_CASE("provisioning: requests are sized to the waiting demand and capped", "[core][provisioning]") {
  struct Row {
    const char* name;
    std::vector<Job> pending;
    int32_t max_nodes;
    double max_cost;
    size_t requested;
  };
  const Row rows[] = {
      {"4 tasks of 4 GPUs: 4 nodes", {JobBuilder(1).Tasks(4).GpusPerTask(4, "h100").Build()}, 8, 0, 4},
      {"two jobs of 2x2 GPUs: two tasks per node", {JobBuilder(1).Tasks(2).GpusPerTask(2).Build(),
                                                    JobBuilder(2).Tasks(2).GpusPerTask(2).Build()}, 8, 0, 2},
      {"max_nodes caps the request", {JobBuilder(1).Tasks(4).GpusPerTask(4).Build()}, 2, 0, 2},
      {"budget 20 per hour buys two 8-per-hour nodes", {JobBuilder(1).Tasks(4).GpusPerTask(4).Build()}, 8, 20, 2},
      {"budget below one node: nothing", {JobBuilder(1).Tasks(4).GpusPerTask(4).Build()}, 8, 7.5, 0},
      {"elastic 2-6 counts its largest size", {JobBuilder(1).Elastic(2, 6).GpusPerTask(4).Build()}, 8, 0, 6},
      {"8 GPUs per task fits no node of the shape", {JobBuilder(1).GpusPerTask(8).Build()}, 8, 0, 0},
      {"an a100 job does not fit an h100 shape", {JobBuilder(1).GpusPerTask(1, "a100").Build()}, 8, 0, 0},
      {"a feature the shape lacks", {JobBuilder(1).GpusPerTask(1).Features({"ib"}).Build()}, 8, 0, 0},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      ClusterState s = BusyCluster();
      for (const Job& j : row.pending) s.jobs.push_back(j);
      const ProvisioningPlan plan = Plan(s, SpotPool(row.max_nodes, row.max_cost), {}, 10);
      size_t n = 0;
      for (const ProvisionRequest& r : plan.resume) n += r.nodes.size();
      CHECK(n == row.requested);
      CHECK(plan.ledger.nodes.size() == row.requested);
      CHECK(plan.suspend.empty());
      if (n > 0) {
        CHECK(plan.resume[0].pool == Pool::kSpot);
        CHECK(plan.resume[0].nodes[0] == "spot-p1");
        CHECK(plan.resume[0].cost_per_hour == Approx(8.0 * static_cast<double>(n)));
        CHECK(plan.cost_per_hour.at(Pool::kSpot) == Approx(8.0 * static_cast<double>(n)));
      }
    }
  }
}

TEST_CASE("provisioning: a job that never uses spot asks nothing of the spot pool", "[core][provisioning]") {
  ClusterState s = BusyCluster();
  Job j = JobBuilder(1).GpusPerTask(4).Build();
  j.spec.spot = SpotPreference::kNever;
  s.jobs.push_back(j);
  CHECK(Plan(s, SpotPool(4), {}, 10).resume.empty());
}

TEST_CASE("provisioning: nodes requested and not registered count against the demand", "[core][provisioning]") {
  ClusterState s = BusyCluster();
  s.jobs.push_back(JobBuilder(1).Tasks(3).GpusPerTask(4).Build());
  const PolicySet p = SpotPool(8);
  const ProvisioningPlan first = Plan(s, p, {}, 10);
  REQUIRE(first.resume.size() == 1);
  CHECK(first.resume[0].nodes == std::vector<std::string>{"spot-p1", "spot-p2", "spot-p3"});
  CHECK(first.resume[0].jobs == std::vector<JobId>{1});
  // Still inside resume_timeout: nothing more is asked, nothing failed.
  const ProvisioningPlan again = Plan(s, p, first.ledger, 40);
  CHECK(again.resume.empty());
  CHECK(again.suspend.empty());
  CHECK(again.ledger == first.ledger);
  // A second job arrives: only its own node is asked for.
  s.jobs.push_back(JobBuilder(2).GpusPerTask(4).Build());
  const ProvisioningPlan more = Plan(s, p, first.ledger, 41);
  REQUIRE(more.resume.size() == 1);
  CHECK(more.resume[0].nodes == std::vector<std::string>{"spot-p4"});
}

TEST_CASE("provisioning: a node that does not register within resume_timeout fails and is asked for again",
          "[core][provisioning]") {
  ClusterState s = BusyCluster();
  s.jobs.push_back(JobBuilder(1).Tasks(2).GpusPerTask(4).Build());
  const PolicySet p = SpotPool(2);
  const ProvisioningPlan first = Plan(s, p, {}, 0);
  REQUIRE(first.ledger.nodes.size() == 2);
  s.nodes.push_back(Registered("spot-p1"));  // p1 registers, p2 never does
  // The registered node is idle but the job still needs 2: at 59 s nothing fails yet.
  const ProvisioningPlan before = Plan(s, p, first.ledger, 59);
  CHECK(before.suspend.empty());
  CHECK(before.resume.empty());
  const ProvisioningPlan after = Plan(s, p, before.ledger, 60);
  REQUIRE(after.suspend.size() == 1);
  CHECK(after.suspend[0].node == "spot-p2");
  CHECK(after.suspend[0].failed);
  CHECK(after.suspend[0].reason == "did not register within 60 s (resume_timeout)");
  // Its demand is asked for again under a new name (names are never reused).
  REQUIRE(after.resume.size() == 1);
  CHECK(after.resume[0].nodes == std::vector<std::string>{"spot-p3"});
  REQUIRE(after.ledger.nodes.size() == 2);
  CHECK(after.ledger.nodes[0].name == "spot-p1");
  CHECK(after.ledger.nodes[0].registered);
}

TEST_CASE("provisioning: a created node is released after idle_time, not while busy", "[core][provisioning]") {
  ClusterState s = BusyCluster();
  s.jobs.push_back(JobBuilder(1).GpusPerTask(4).TimeLimit(3600s).Build());
  const PolicySet p = SpotPool(2);
  ProvisioningPlan plan = Plan(s, p, {}, 0);
  REQUIRE(plan.resume.size() == 1);
  s.nodes.push_back(Registered("spot-p1"));
  // The cycle at 10 starts job 1 on the new node: busy, not idle.
  plan = Plan(s, p, plan.ledger, 10);
  CHECK(plan.resume.empty());
  REQUIRE(plan.ledger.nodes.size() == 1);
  CHECK(plan.ledger.nodes[0].registered);
  CHECK(plan.ledger.nodes[0].idle_since == 0);
  // It ran and ended at 100: idle from the first plan after, released idle_time (300 s) later.
  s.jobs.pop_back();
  plan = Plan(s, p, plan.ledger, 100);
  CHECK(plan.ledger.nodes[0].idle_since == 100);
  CHECK(plan.suspend.empty());
  CHECK(Plan(s, p, plan.ledger, 399).suspend.empty());
  const ProvisioningPlan released = Plan(s, p, plan.ledger, 400);
  REQUIRE(released.suspend.size() == 1);
  CHECK(released.suspend[0].node == "spot-p1");
  CHECK_FALSE(released.suspend[0].failed);
  CHECK(released.suspend[0].reason == "idle 300 s (idle_time 300 s)");
  CHECK(released.ledger.nodes.empty());
  CHECK(released.cost_per_hour.at(Pool::kSpot) == 0);
  // A static node of the pool (not in the ledger) is never released.
  CHECK(Plan(s, p, released.ledger, 10000).suspend.empty());
}

TEST_CASE("provisioning: a drained created node with no task is released at once", "[core][provisioning]") {
  ClusterState s = BusyCluster();
  Node n = Registered("spot-p1");
  n.health = NodeHealth::kDrain;
  s.nodes.push_back(n);
  ProvisionLedger ledger;
  ledger.nodes.push_back(ProvisionedNode{"spot-p1", Pool::kSpot, true, 0, 0});
  ledger.next_index[Pool::kSpot] = 1;
  const ProvisioningPlan plan = Plan(s, SpotPool(2), ledger, 5);
  REQUIRE(plan.suspend.size() == 1);
  CHECK(plan.suspend[0].reason == "drained with no task");
}

TEST_CASE("provisioning: a down created node is kept resume_timeout (it may reconnect) then released",
          "[core][provisioning]") {
  ClusterState s = BusyCluster();
  Node n = Registered("spot-p1");
  n.health = NodeHealth::kDown;  // e.g. every node right after a schedd restart, until its agent is back
  s.nodes.push_back(n);
  ProvisionLedger ledger;
  ledger.nodes.push_back(ProvisionedNode{"spot-p1", Pool::kSpot, true, 0, 0});  // idle clock unknown
  ledger.next_index[Pool::kSpot] = 1;
  const ProvisioningPlan first = Plan(s, SpotPool(2), ledger, 100);
  CHECK(first.suspend.empty());
  REQUIRE(first.ledger.nodes.size() == 1);
  CHECK(first.ledger.nodes[0].idle_since == 100);
  CHECK(Plan(s, SpotPool(2), first.ledger, 159).suspend.empty());  // resume_timeout is 60 s
  const ProvisioningPlan later = Plan(s, SpotPool(2), first.ledger, 160);
  REQUIRE(later.suspend.size() == 1);
  CHECK(later.suspend[0].reason == "down with no task");
}

TEST_CASE("provisioning: new names skip nodes already in the cluster", "[core][provisioning]") {
  ClusterState s = BusyCluster();
  s.nodes.push_back(Registered("spot-p1"));  // a static node that happens to carry the name
  Allocation a;
  a.tasks.push_back(Task(0, "spot-p1", {0, 1, 2, 3}, "h100", 1000));
  s.jobs.push_back(JobBuilder(101).GpusPerTask(4).Running(0, a).Build());
  s.jobs.push_back(JobBuilder(1).GpusPerTask(4).Build());
  const ProvisioningPlan plan = Plan(s, SpotPool(2), {}, 0);
  REQUIRE(plan.resume.size() == 1);
  CHECK(plan.resume[0].nodes == std::vector<std::string>{"spot-p2"});
}

TEST_CASE("provisioning: NodeCostPerHour prices cores and GPUs of the shape", "[core][provisioning]") {
  PolicySet p;
  p.placement.pricing["on-demand"].cpu_hour = 0.5;
  p.placement.pricing["on-demand"].gpu_hour[""] = 3.0;
  const Node n = ClusterBuilder().Pool("on-demand").Nodes("x").Gpus("a100", 2).Cpus(4).Build()[0];
  CHECK(NodeCostPerHour(n, p) == Approx(4 * 0.5 + 2 * 3.0));
  CHECK(NodeCostPerHour(Registered("y"), p) == 0);  // spot is not priced
}

TEST_CASE("provisioning: a job only created nodes could run is feasible at submit", "[core][provisioning]") {
  std::vector<Node> nodes = ClusterBuilder().Pool("on-demand").Nodes("od-[1-2]").Cpus(2).Build();
  const JobSpec spec = JobBuilder(1).Tasks(2).GpusPerTask(4, "h100").Build().spec;
  CHECK(CheckJobFeasible(nodes, PolicySet{}, spec).has_value());
  const PolicySet p = SpotPool(2);
  AppendProvisionable(p, nodes);
  REQUIRE(nodes.size() == 4);
  CHECK(nodes[2].name == "spot-p*1");
  CHECK(nodes[3].pool == Pool::kSpot);
  CHECK_FALSE(CheckJobFeasible(nodes, p, spec).has_value());
  // Three tasks of 4 GPUs need three nodes; the pool makes at most two.
  CHECK(CheckJobFeasible(nodes, p, JobBuilder(1).Tasks(3).GpusPerTask(4, "h100").Build().spec).has_value());
}

TEST_CASE("provisioning: a job counts for the cheapest pool that fits it only", "[core][provisioning]") {
  PolicySet p = SpotPool(4);
  ProvisioningPolicy od = p.provisioning[0];
  od.pool = Pool::kOnDemand;
  od.shape.pool = Pool::kOnDemand;
  p.provisioning.insert(p.provisioning.begin(), od);
  p.placement.pricing["on-demand"].gpu_hour["h100"] = 6.0;
  ClusterState s = BusyCluster();
  s.jobs.push_back(JobBuilder(1).GpusPerTask(4).Build());
  Job never = JobBuilder(2).GpusPerTask(4).Build();
  never.spec.spot = SpotPreference::kNever;
  s.jobs.push_back(never);
  const ProvisioningPlan plan = Plan(s, p, {}, 0);
  REQUIRE(plan.resume.size() == 2);
  CHECK(plan.resume[0].pool == Pool::kOnDemand);
  CHECK(plan.resume[0].jobs == std::vector<JobId>{2});
  CHECK(plan.resume[0].nodes == std::vector<std::string>{"on-demand-p1"});
  CHECK(plan.resume[1].pool == Pool::kSpot);
  CHECK(plan.resume[1].jobs == std::vector<JobId>{1});
  CHECK(plan.resume[1].nodes == std::vector<std::string>{"spot-p1"});
}

TEST_CASE("provisioning: a spot-prefer job counts for spot during its wait budget only", "[core][provisioning]") {
  PolicySet p = SpotPool(4);
  ProvisioningPolicy od = p.provisioning[0];
  od.pool = Pool::kOnDemand;
  od.shape.pool = Pool::kOnDemand;
  p.provisioning.push_back(od);
  p.placement.pricing["on-demand"].gpu_hour["h100"] = 1.0;  // cheaper than spot here
  p.placement.spot_wait_budget = 600;
  ClusterState s = BusyCluster();
  Job j = JobBuilder(1).GpusPerTask(4).Build();
  j.spec.spot = SpotPreference::kPrefer;
  s.jobs.push_back(j);
  for (const auto& [now, pool] : {std::pair{Timestamp{10}, Pool::kSpot}, std::pair{Timestamp{700}, Pool::kOnDemand}}) {
    const ProvisioningPlan plan = Plan(s, p, {}, now);
    REQUIRE(plan.resume.size() == 1);
    CHECK(plan.resume[0].pool == pool);
  }
}

namespace {

// Three busy spot nodes (4 h100 each) running `job` with one 4-GPU task each, plus `free_nodes`
// idle static nodes of the same shape.
ClusterState ShrunkGang(Job job, int free_nodes) {
  ClusterState s;
  s.nodes = ClusterBuilder().Pool("spot").Nodes("n[1-3]").Gpus("h100", 4).Cpus(16).MemoryGiB(64).Build();
  for (int i = 0; i < free_nodes; ++i)
    s.nodes.push_back(Registered("idle-" + std::to_string(i)));
  Allocation a;
  for (const char* n : {"n1", "n2", "n3"}) a.tasks.push_back(Task(static_cast<int32_t>(a.tasks.size()), n, {0, 1, 2, 3}, "h100", 1000));
  job.state = JobState::kRunning;
  job.start_time = 0;
  job.allocation = a;
  s.jobs.push_back(job);
  return s;
}

}  // namespace

TEST_CASE("provisioning: a running elastic gang below its largest size asks for the nodes it lacks",
          "[core][provisioning][elastic]") {
  struct Row {
    const char* name;
    Job job;
    bool grow;
    int free_nodes;
    size_t requested;
  };
  const Job elastic = JobBuilder(1).Elastic(2, 4).GpusPerTask(4, "h100").CpusPerTask(1).TimeLimit(3600s).Build();
  Job preempting = elastic;
  preempting.preempting = true;
  Job no_limit = elastic;
  no_limit.spec.time_limit = 0;
  Job ending = elastic;
  ending.spec.time_limit = 200;  // at t = 10: 190 s left x 1/4 = 47 s gain < the 60 s restart cost
  const Row rows[] = {
      {"3 of 2-4 tasks: one replacement node", elastic, true, 0, 1},
      {"elastic 2-6 at 3 tasks: three nodes", JobBuilder(1).Elastic(2, 6).GpusPerTask(4, "h100").TimeLimit(3600s).Build(),
       true, 0, 3},
      {"jobs do not grow: nothing", elastic, false, 0, 0},
      {"a free static node holds the missing task: nothing", elastic, true, 1, 0},
      {"a job being stopped: nothing", preempting, true, 0, 0},
      {"no time limit (never grows): nothing", no_limit, true, 0, 0},
      {"near its end the grow would not pay: nothing", ending, true, 0, 0},
      {"a rigid gang: nothing", JobBuilder(1).Tasks(3).GpusPerTask(4, "h100").TimeLimit(3600s).Build(), true, 0, 0},
  };
  for (const Row& row : rows) {
    SECTION(row.name) {
      PolicySet p = SpotPool(8);
      p.elastic.grow = row.grow;
      p.elastic.min_resize_interval = 600;  // no grow onto free nodes in this cycle
      const ClusterState s = ShrunkGang(row.job, row.free_nodes);
      const ProvisioningPlan plan = Plan(s, p, {}, 10);
      size_t n = 0;
      for (const ProvisionRequest& r : plan.resume) n += r.nodes.size();
      CHECK(n == row.requested);
      if (n > 0) CHECK(plan.resume[0].jobs == std::vector<JobId>{1});
      // Once requested, the replacement counts against the demand: no second request.
      if (n > 0) CHECK(Plan(s, p, plan.ledger, 20).resume.empty());
    }
  }
}
