// Elastic capacity in the daemon (issue 16 point 4): the programs are fork/exec'd with the hostlist
// as argv[1] and the shape in the environment, killed after their timeout; the controller asks for
// nodes for a waiting job (event, note in its reason, metrics), fails a node that does not
// register, and releases created nodes after idle_time. The programs are small scripts that
// append their arguments to a file.
#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <limits>
#include <sstream>

#include "mlsched/v1/stored.pb.h"
#include "schedd/server/controller.h"
#include "schedd/server/provision_runner.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

// An executable script at dir/name that appends "name $1 pool=$MLSCHED_PROVISION_POOL" to dir/calls.
std::string FakeProgram(const TempDir& dir, const std::string& name, const std::string& extra = "") {
  const std::string path = (dir.path / name).string();
  std::ofstream(path) << "#!/bin/sh\necho \"" << name << " $1 pool=$MLSCHED_PROVISION_POOL cpus=$MLSCHED_PROVISION_CPUS\" >> '"
                      << (dir.path / "calls").string() << "'\necho to-the-log\n" << extra;
  chmod(path.c_str(), 0755);
  return path;
}

std::string Calls(const TempDir& dir) {
  std::ifstream in(dir.path / "calls");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A spot pool of 4-CPU, 16 GiB nodes run by the fake programs in `progs`: at most 2, idle_time
// 30 s, resume_timeout 20 s.
core::PolicySet SpotProvisioning(const TempDir& progs) {
  core::PolicySet policy;
  core::ProvisioningPolicy cfg;
  cfg.pool = core::Pool::kSpot;
  cfg.resume_program = FakeProgram(progs, "resume");
  cfg.suspend_program = FakeProgram(progs, "suspend");
  cfg.max_nodes = 2;
  cfg.idle_time = 30;
  cfg.resume_timeout = 20;
  cfg.shape.pool = core::Pool::kSpot;
  cfg.shape.capacity.cpu_millis = 4000;
  cfg.shape.capacity.memory_bytes = int64_t{16} << 30;
  policy.provisioning.push_back(cfg);
  return policy;
}

}  // namespace

TEST_CASE("RunProgram: argv[1] is the hostlist, the shape is in the environment, output is kept", "[provision]") {
  TempDir dir;
  ProgramCall call{"resume", FakeProgram(dir, "resume"), "spot-p[1-2]", {{"MLSCHED_PROVISION_POOL", "spot"}}, 10};
  const ProgramResult r = RunProgram(call);
  CHECK(r.error.empty());
  CHECK(r.exit_code == 0);
  CHECK_FALSE(r.timed_out);
  CHECK(r.output == "to-the-log\n");
  CHECK(Calls(dir) == "resume spot-p[1-2] pool=spot cpus=\n");
}

TEST_CASE("RunProgram: a hung program is killed after its timeout", "[provision]") {
  TempDir dir;
  const auto t0 = std::chrono::steady_clock::now();
  const ProgramResult r = RunProgram(ProgramCall{"resume", FakeProgram(dir, "hang", "exec sleep 30\n"), "x", {}, 1});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.timed_out);
  CHECK(r.exit_code == 128 + 9);
  CHECK(took < 5);
}

TEST_CASE("RunProgram: a relative or missing program is not run", "[provision]") {
  CHECK(RunProgram(ProgramCall{"resume", "resume.sh", "x", {}, 1}).error == "not an absolute path: 'resume.sh'");
  const ProgramResult r = RunProgram(ProgramCall{"resume", "/nonexistent/resume", "x", {}, 1});
  CHECK(r.exit_code == 127);
  CHECK(r.error == "could not execute /nonexistent/resume");
}

TEST_CASE("the controller requests nodes for a waiting job, fails one that never registers, releases idle ones",
          "[controller][provision]") {
  TempDir progs;
  ControllerWorld w;
  core::PolicySet policy = SpotProvisioning(progs);
  policy.placement.pricing["spot"].cpu_hour = 0.5;
  w.Start(policy);
  SchedMetrics metrics;
  w.ctl->SetMetrics(&metrics);
  ProvisionRunner runner;
  w.ctl->SetProvisionRunner(&runner);
  auto reg = [&](const std::string& name) {
    v1::RegisterNode r = NodeReg(name, 4);
    r.set_pool(v1::POOL_SPOT);
    w.ctl->OnRegister(r, w.now);
  };
  int64_t id = 0;
  v1::JobSpec spec = Spec(2, 4);
  spec.set_checkpoint_interval_s(60);  // it checkpoints, so it may run on spot
  REQUIRE(w.ctl->Submit(User("alice", 1001), spec, w.now, &id).ok());

  // No node at all: the job waits for resources and the pool asks for two nodes.
  w.ctl->RunCycle(w.now);
  runner.Drain();
  CHECK(Calls(progs) == "resume spot-p[1-2] pool=spot cpus=4000m\n");
  v1::JobInfo info;
  REQUIRE(w.ctl->Get(Root(), id, &info).ok());
  CHECK(info.state() == v1::PENDING);
  CHECK_THAT(info.reason_detail(), Catch::Contains("requested 2 nodes from pool spot (spot-p[1-2])"));
  const auto job_events = EventsOf(w.dir, id, true);
  REQUIRE_FALSE(job_events.empty());
  CHECK_THAT(job_events.back(), Catch::StartsWith("provision||requested 2 nodes from pool spot (spot-p[1-2]): 2 nodes needed"));
  CHECK(w.ctl->ProvisionedNodes().nodes.size() == 2);

  // spot-p1 registers, spot-p2 never does: failed at resume_timeout, given to suspend, asked again as spot-p3.
  w.now += 5;
  reg("spot-p1");
  w.ctl->RunCycle(w.now);
  w.now += 15;
  w.ctl->RunCycle(w.now);
  runner.Drain();
  CHECK(Calls(progs) == "resume spot-p[1-2] pool=spot cpus=4000m\nsuspend spot-p2 pool=spot cpus=4000m\n"
                        "resume spot-p3 pool=spot cpus=4000m\n");
  const auto node_events = EventsOf(w.dir, 0, true);
  CHECK(std::count(node_events.begin(), node_events.end(),
                   "provision-failed|spot-p2|did not register within 20 s (resume_timeout)") == 1);
  CHECK(std::count(node_events.begin(), node_events.end(), "provision-registered|spot-p1|registered 5 s after the request") == 1);

  // spot-p3 registers: the job runs on the two created nodes, ends, and they are released idle_time later.
  reg("spot-p3");
  w.ctl->RunCycle(w.now);
  REQUIRE(w.ctl->Get(Root(), id, &info).ok());
  REQUIRE(info.state() == v1::RUNNING);
  auto start_all = [&] {
    for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), PrepareOk(id, info.attempt()), w.now);
    for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), Started(id, info.attempt(), t.rank()), w.now);
  };
  start_all();
  for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, info.attempt(), t.rank(), 0), w.now);
  w.now += 1;
  w.ctl->RunCycle(w.now);  // idle from here
  CHECK(metrics.Render(w.ctl->CollectGauges()).find("mlsched_provision_cost_per_hour{pool=\"spot\"} 4") != std::string::npos);
  w.now += 29;
  w.ctl->RunCycle(w.now);
  runner.Drain();
  CHECK(Calls(progs).find("suspend spot-p[1,3]") == std::string::npos);
  w.now += 1;
  w.ctl->RunCycle(w.now);
  runner.Drain();
  CHECK_THAT(Calls(progs), Catch::EndsWith("suspend spot-p[1,3] pool=spot cpus=4000m\n"));
  CHECK(w.ctl->ProvisionedNodes().nodes.empty());
  const std::string text = metrics.Render(w.ctl->CollectGauges());
  CHECK_THAT(text, Catch::Contains("mlsched_provision_nodes_total{event=\"requested\",pool=\"spot\"} 3"));
  CHECK_THAT(text, Catch::Contains("mlsched_provision_nodes_total{event=\"registered\",pool=\"spot\"} 2"));
  CHECK_THAT(text, Catch::Contains("mlsched_provision_nodes_total{event=\"failed\",pool=\"spot\"} 1"));
  CHECK_THAT(text, Catch::Contains("mlsched_provision_nodes_total{event=\"released\",pool=\"spot\"} 2"));
  CHECK_THAT(text, Catch::Contains("mlsched_provision_cost_per_hour{pool=\"spot\"} 0"));
}

TEST_CASE("the provisioner's ledger survives a schedd restart: a created node is still released", "[controller][provision]") {
  TempDir progs;
  ControllerWorld w;
  const core::PolicySet policy = SpotProvisioning(progs);
  w.Start(policy);
  auto wired = [&w] { return std::make_unique<ProvisionRunner>([&w](const ProgramCall& c, const ProgramResult& r) { w.ctl->OnProgramDone(c, r); }); };
  auto runner = wired();
  w.ctl->SetProvisionRunner(runner.get());
  int64_t id = 0;
  v1::JobSpec spec = Spec(1, 4);
  spec.set_checkpoint_interval_s(60);
  REQUIRE(w.ctl->Submit(User("alice", 1001), spec, w.now, &id).ok());
  w.ctl->RunCycle(w.now);
  runner->Drain();
  REQUIRE(Calls(progs) == "resume spot-p1 pool=spot cpus=4000m\n");
  v1::CancelJobsRequest cancel;
  cancel.add_job_ids(id);
  REQUIRE(w.ctl->Cancel(User("alice", 1001), cancel, w.now).cancelled_size() == 1);  // nothing needs the node now

  // schedd restarts over the same store before the node registers.
  w.ctl.reset();
  runner.reset();
  w.store.reset();
  w.store = std::make_unique<SqliteStore>(w.dir.path.string());
  w.Start(policy);
  w.ctl->Recover(w.now);
  runner = wired();
  w.ctl->SetProvisionRunner(runner.get());
  const core::ProvisionLedger ledger = w.ctl->ProvisionedNodes();
  REQUIRE(ledger.nodes.size() == 1);
  CHECK(ledger.nodes[0].name == "spot-p1");
  CHECK_FALSE(ledger.nodes[0].registered);
  CHECK(ledger.next_index.at(core::Pool::kSpot) == 1);

  v1::RegisterNode r = NodeReg("spot-p1", 4);
  r.set_pool(v1::POOL_SPOT);
  w.ctl->OnRegister(r, w.now + 5);
  w.ctl->RunCycle(w.now + 5);   // registered, idle from here
  w.ctl->RunCycle(w.now + 35);  // idle_time: released through the suspend program
  runner->Drain();
  CHECK_THAT(Calls(progs), Catch::EndsWith("suspend spot-p1 pool=spot cpus=4000m\n"));
  CHECK(w.ctl->ProvisionedNodes().nodes.empty());
  CHECK(w.ctl->ReleasingProvisionedNodes().empty());  // its suspend program finished
  // New names continue after the recovered index.
  w.ctl->RunCycle(w.now + 36);
  CHECK(w.ctl->ProvisionedNodes().next_index.at(core::Pool::kSpot) == 1);
}

TEST_CASE("a stored provisioning ledger is checked when read back", "[provision]") {
  core::ProvisionLedger ledger;
  ledger.nodes.push_back(core::ProvisionedNode{"spot-p3", core::Pool::kSpot, true, 100, 120});
  ledger.next_index[core::Pool::kSpot] = 3;
  std::string error;
  const auto back = ParseProvisionLedger(SerializeProvisionLedger(ledger), &error);
  REQUIRE(back);
  CHECK(*back == ledger);
  CHECK_FALSE(ParseProvisionLedger("\xff\xff not a proto", &error));
  CHECK_FALSE(error.empty());
  v1::StoredProvisionLedger bad;
  bad.add_nodes()->set_name("x");
  bad.mutable_nodes(0)->set_pool("moon");
  CHECK_FALSE(ParseProvisionLedger(bad.SerializeAsString(), &error));
  CHECK(error == "node 'x' of pool 'moon' is invalid");
  bad.mutable_nodes(0)->set_pool("spot");
  bad.mutable_nodes(0)->set_name(std::string(300, 'n'));
  CHECK_FALSE(ParseProvisionLedger(bad.SerializeAsString(), &error));
  CHECK_FALSE(ParseProvisionLedger(std::string(kMaxProvisionLedgerBytes + 1, '\0'), &error));
  v1::StoredProvisionLedger huge_index;
  (*huge_index.mutable_next_index())["spot"] = std::numeric_limits<int64_t>::max();
  CHECK_FALSE(ParseProvisionLedger(huge_index.SerializeAsString(), &error));
  CHECK(error == "next_index of pool 'spot' is invalid");
}

TEST_CASE("a suspend program that had not finished before a schedd restart runs again after it", "[controller][provision]") {
  TempDir progs;
  ControllerWorld w;
  const core::PolicySet policy = SpotProvisioning(progs);
  w.Start(policy);
  auto runner = std::make_unique<ProvisionRunner>();  // not wired: its suspends never report back
  w.ctl->SetProvisionRunner(runner.get());
  v1::RegisterNode r = NodeReg("spot-p1", 4);
  r.set_pool(v1::POOL_SPOT);
  int64_t id = 0;
  v1::JobSpec spec = Spec(1, 4);
  spec.set_checkpoint_interval_s(60);
  REQUIRE(w.ctl->Submit(User("alice", 1001), spec, w.now, &id).ok());
  w.ctl->RunCycle(w.now);  // asks for spot-p1
  v1::CancelJobsRequest cancel;
  cancel.add_job_ids(id);
  REQUIRE(w.ctl->Cancel(User("alice", 1001), cancel, w.now).cancelled_size() == 1);
  w.ctl->OnRegister(r, w.now + 1);
  w.ctl->RunCycle(w.now + 1);
  w.ctl->RunCycle(w.now + 31);  // idle_time: released, suspend submitted
  runner->Drain();
  REQUIRE(w.ctl->ReleasingProvisionedNodes().count("spot-p1") == 1);  // as if schedd died before it finished

  w.ctl.reset();
  runner.reset();
  w.store.reset();
  w.store = std::make_unique<SqliteStore>(w.dir.path.string());
  w.Start(policy);
  w.ctl->Recover(w.now + 40);
  runner = std::make_unique<ProvisionRunner>([&w](const ProgramCall& c, const ProgramResult& res) { w.ctl->OnProgramDone(c, res); });
  w.ctl->SetProvisionRunner(runner.get());
  CHECK(w.ctl->ProvisionedNodes().nodes.empty());
  CHECK(w.ctl->ReleasingProvisionedNodes().count("spot-p1") == 1);
  w.ctl->RunCycle(w.now + 41);
  runner->Drain();
  const std::string calls = Calls(progs);
  CHECK(std::count(calls.begin(), calls.end(), '\n') == 3);  // resume, suspend, suspend again
  CHECK_THAT(calls, Catch::EndsWith("suspend spot-p1 pool=spot cpus=4000m\nsuspend spot-p1 pool=spot cpus=4000m\n"));
  CHECK(w.ctl->ReleasingProvisionedNodes().empty());
  w.ctl->RunCycle(w.now + 42);  // the finished suspend leaves the stored list too
  w.ctl.reset();
  runner.reset();
  w.store.reset();
  w.store = std::make_unique<SqliteStore>(w.dir.path.string());
  w.Start(policy);
  w.ctl->Recover(w.now + 50);
  CHECK(w.ctl->ReleasingProvisionedNodes().empty());
}
