// The daemon's state machine driven without sockets: a recording sink plays the agents' side.
#include <catch2/catch.hpp>

#include <functional>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

using World = NodesWorld;

}  // namespace

TEST_CASE("a gang is prepared on every node, committed, and completes", "[controller]") {
  World w(3, 2);
  int64_t id = w.Submit(Spec(3, 2), w.alice);  // one task per node
  w.ctl->RunCycle(w.now);
  std::set<int32_t> ranks;
  for (const char* n : {"n1", "n2", "n3"}) {
    auto prep = w.sink.Of(n, v1::SchedulerMessage::kPrepare);
    REQUIRE(prep.size() == 1);
    CHECK(prep[0].prepare().world_size() == 3);
    CHECK(prep[0].prepare().spec().argv(0) == "/bin/true");
    for (const auto& t : prep[0].prepare().tasks()) ranks.insert(t.rank());
    CHECK(w.sink.Of(n, v1::SchedulerMessage::kCommit).empty());  // nothing starts before all prepared
  }
  CHECK(ranks == std::set<int32_t>{0, 1, 2});
  CHECK(w.Job(id).state() == v1::RUNNING);
  w.PrepareAndStartAll();
  for (const char* n : {"n1", "n2", "n3"}) CHECK(w.sink.Of(n, v1::SchedulerMessage::kCommit).size() == 1);
  auto info = w.Job(id);
  for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, 1, t.rank(), 0), w.now + 5);
  CHECK(w.Job(id).state() == v1::COMPLETED);
}

TEST_CASE("a gang larger than free capacity stays pending with reason Resources", "[controller]") {
  World w(2, 2);
  int64_t first = w.Submit(Spec(1, 2), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  w.sink.Clear();
  int64_t big = w.Submit(Spec(2, 2), w.alice);  // needs both nodes; one is busy
  w.ctl->RunCycle(w.now);
  CHECK(w.sink.sent.empty());  // no task of the gang is prepared anywhere
  auto info = w.Job(big);
  CHECK(info.state() == v1::PENDING);
  CHECK(info.reason() == "Resources");
  auto t = w.Job(first).tasks(0);
  w.ctl->OnAgentMessage(t.node(), Exited(first, 1, 0, 0), w.now + 1);
  w.ctl->RunCycle(w.now + 1);
  CHECK(w.Job(big).state() == v1::RUNNING);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kPrepare).size() == 1);
  CHECK(w.sink.Of("n2", v1::SchedulerMessage::kPrepare).size() == 1);
}

TEST_CASE("a failed prepare aborts everywhere and requeues", "[controller]") {
  World w(2, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  v1::AgentMessage bad = PrepareOk(id, 1);
  bad.mutable_prepare_result()->set_ok(false);
  bad.mutable_prepare_result()->set_error("workdir missing");
  w.ctl->OnAgentMessage("n1", PrepareOk(id, 1), w.now);
  w.ctl->OnAgentMessage("n2", bad, w.now);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kAbort).size() == 1);
  CHECK(w.sink.Of("n2", v1::SchedulerMessage::kAbort).size() == 1);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kCommit).empty());
  auto info = w.Job(id);
  CHECK(info.state() == v1::PENDING);
  CHECK(info.requeue_count() == 1);
  // Backoff: not retried at once, retried after it.
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 1);
  CHECK(w.sink.sent.empty());
  w.ctl->RunCycle(w.now + w.cfg.requeue_backoff_s + 1);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kPrepare).size() == 1);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kPrepare)[0].prepare().attempt() == 2);
}

TEST_CASE("a task failing fails the job and kills the other ranks", "[controller]") {
  World w(2, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  const auto& t0 = info.tasks(0);
  w.ctl->OnAgentMessage(t0.node(), Exited(id, 1, t0.rank(), 3), w.now + 1);
  info = w.Job(id);
  CHECK(info.exit_code() == 3);
  CHECK(info.state() == v1::COMPLETING);  // the other rank is still being killed
  const auto& t1 = info.tasks(1);
  auto sig = w.sink.Of(t1.node(), v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().kill());
  // Its resources stay held until it exits.
  int64_t next = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now + 2);
  CHECK(w.Job(next).state() == v1::PENDING);
  w.ctl->OnAgentMessage(t1.node(), Exited(id, 1, t1.rank(), 143), w.now + 3);
  CHECK(w.Job(id).state() == v1::FAILED);
  w.ctl->RunCycle(w.now + 4);
  CHECK(w.Job(next).state() == v1::RUNNING);
}

TEST_CASE("a rank the kernel killed for memory fails the job with reason OutOfMemory", "[controller]") {
  World w(1, 2);
  auto reg = NodeReg("n1", 2);
  reg.set_isolation("v1:memory,cpu,pids,devices,freezer");
  w.ctl->OnRegister(reg, w.now);
  CHECK(w.ctl->Nodes().at(0).isolation() == "v1:memory,cpu,pids,devices,freezer");
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto m = Exited(id, 1, 0, 137);
  m.mutable_task_exited()->set_signaled(true);
  m.mutable_task_exited()->set_error(
      "OUT_OF_MEMORY: task used more than its 64 MiB memory limit (1 process killed by the kernel's OOM killer)");
  w.ctl->OnAgentMessage("n1", m, w.now + 1);
  auto info = w.Job(id);
  CHECK(info.state() == v1::FAILED);
  CHECK(info.exit_code() == 137);
  CHECK(info.reason() ==
        "OutOfMemory: rank 0: OUT_OF_MEMORY: task used more than its 64 MiB memory limit (1 process killed by the "
        "kernel's OOM killer)");
}

TEST_CASE("bad input is rejected with a clear error and changes nothing", "[controller]") {
  World w(2, 4);
  int64_t id = 0;
  auto reject = [&](v1::JobSpec s) {
    Status st = w.ctl->Submit(w.alice, s, w.now, &id);
    CHECK(st.code == Status::kInvalidArgument);
    return st.message;
  };
  CHECK(reject(Spec(0)) == "ntasks must be >= 1 (got 0)");
  auto s = Spec(1);
  s.set_partition("nope");
  CHECK_THAT(reject(s), Catch::Contains("unknown partition 'nope'"));
  CHECK_THAT(reject(Spec(1, 64)), Catch::Contains("rejected"));
  CHECK_THAT(reject(Spec(1, 1, 9)), Catch::Contains("GPU"));
  s = Spec(1);
  s.clear_argv();
  CHECK_THAT(reject(s), Catch::Contains("no command"));
  s = Spec(1);
  s.set_time_limit_s(365 * 86400);
  CHECK_THAT(reject(s), Catch::Contains("exceeds partition"));
  CHECK(ListAll(*w.ctl, Root(), v1::ListJobsRequest{}).empty());
}

TEST_CASE("users control only their own jobs - operators any", "[controller]") {
  World w(1, 1);
  int64_t id = w.Submit(Spec(1), w.alice);
  v1::CancelJobsRequest req;
  req.add_job_ids(id);
  auto resp = w.ctl->Cancel(User("bob", 1002), req, w.now);
  REQUIRE(resp.errors_size() == 1);
  CHECK(resp.errors(0) == "job " + std::to_string(id) + ": permission denied: owned by alice");
  CHECK(w.Job(id).state() != v1::CANCELLED);
  CHECK(w.ctl->Hold(User("bob", 1002), id, false, w.now).code == Status::kPermissionDenied);
  resp = w.ctl->Cancel(User("root", 0, true), req, w.now);
  CHECK(resp.cancelled_size() == 1);
  CHECK(w.Job(id).state() == v1::CANCELLED);
}

TEST_CASE("time limits end jobs with TIMEOUT - held jobs wait for release", "[controller]") {
  World w(1, 2);
  auto s = Spec(1);
  s.set_time_limit_s(60);
  int64_t id = w.Submit(s, w.alice);
  auto held = Spec(1);
  held.set_hold(true);
  int64_t h = w.Submit(held, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  CHECK(w.Job(h).state() == v1::PENDING);
  CHECK(w.Job(h).reason() == "JobHeldUser");
  w.ctl->OnAgentMessage("n1", Heartbeat({{id, 1, 0}}), w.now + 61);
  w.ctl->Tick(w.now + 61);
  CHECK(w.Job(id).reason() == "TimeLimit");
  REQUIRE(w.ctl->Hold(w.alice, h, true, w.now + 62).ok());
  w.ctl->RunCycle(w.now + 62);
  CHECK(w.Job(h).state() == v1::RUNNING);
}

TEST_CASE("spot eviction: the gang is told to checkpoint, exits 75, and is requeued keeping its place", "[controller]") {
  World w(3, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  const std::string spot = info.tasks(0).node();
  v1::AgentMessage notice;
  notice.mutable_eviction()->set_deadline(w.now + 30);
  notice.mutable_eviction()->set_source("aws-instance-action");
  w.ctl->OnAgentMessage(spot, notice, w.now);
  for (const auto& t : info.tasks()) {  // every rank gets SIGTERM with the notice's grace
    auto sig = w.sink.Of(t.node(), v1::SchedulerMessage::kSignal);
    REQUIRE(sig.size() == 1);
    CHECK(sig[0].signal().kill());
    CHECK(sig[0].signal().grace_s() == 28);
  }
  for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, 1, t.rank(), 75), w.now + 5);
  auto after = w.Job(id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "Evicted");
  CHECK(after.submit_time() == info.submit_time());
  CHECK(after.evictions() == 1);
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 6);  // restarts on the two other nodes, never on the evicted one
  auto again = w.Job(id);
  REQUIRE(again.state() == v1::RUNNING);
  CHECK(again.attempt() == 2);
  for (const auto& t : again.tasks()) CHECK(t.node() != spot);
  CHECK(again.pools() == "on-demand");
  CHECK(again.accelerator() == "cpu");
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == spot) CHECK(n.state() == "DRAIN");
}

TEST_CASE("a rank that dies of the eviction's SIGTERM as 128+15 (a shell's or a container init's report) is requeued",
          "[controller]") {
  World w(3, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  v1::AgentMessage notice;
  notice.mutable_eviction()->set_deadline(w.now + 30);
  notice.mutable_eviction()->set_source("aws-instance-action");
  w.ctl->OnAgentMessage(info.tasks(0).node(), notice, w.now);
  // Not signaled: tini (or sh) exited with 143 after its child died of the SIGTERM.
  w.ctl->OnAgentMessage(info.tasks(1).node(), Exited(id, 1, info.tasks(1).rank(), 143), w.now + 1);
  CHECK(w.Job(id).state() == v1::PREEMPTED);  // requeued once its other rank is gone, never FAILED
  w.ctl->OnAgentMessage(info.tasks(0).node(), Exited(id, 1, info.tasks(0).rank(), 75), w.now + 2);
  auto after = w.Job(id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "Evicted");
  CHECK(after.evictions() == 1);
  // Without a stop asked by schedd, 143 stays a failure (the test above).
}

TEST_CASE("lost work: none after exit 75, time since the reported checkpoint after a node failure", "[controller]") {
  World w(2, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  // Both nodes report the tasks with a checkpoint taken 40 s into the attempt.
  for (const auto& t : info.tasks()) {
    auto hb = Heartbeat({{id, 1, t.rank()}});
    hb.mutable_heartbeat()->mutable_running(0)->set_last_checkpoint_time(w.now + 40);
    w.ctl->OnAgentMessage(t.node(), hb, w.now + 50);
  }
  // One rank vanishes from its node's heartbeats: lost after two, 100 s into the attempt.
  const auto& gone = info.tasks(1);
  w.ctl->OnAgentMessage(gone.node(), Heartbeat({}), w.now + 90);
  w.ctl->OnAgentMessage(gone.node(), Heartbeat({}), w.now + 100);
  REQUIRE(w.Job(id).state() == v1::PENDING);
  auto attempts = w.store->LoadAttempts(0, w.now + 1000);
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].outcome == "NodeFail");
  CHECK(attempts[0].lost_work_s == 60);  // 100 - 40, not the whole 100 s

  // Attempt 2 is preempted cleanly (exit 75 = checkpointed): nothing is lost.
  w.ctl->OnAgentMessage(info.tasks(0).node(), Exited(id, 1, info.tasks(0).rank(), 143), w.now + 101);  // the killed rank
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 200);
  w.PrepareAndStartAll();
  info = w.Job(id);
  REQUIRE(info.attempt() == 2);
  w.ctl->OnAgentMessage(info.tasks(0).node(), Exited(id, 2, info.tasks(0).rank(), 75), w.now + 300);
  attempts = w.store->LoadAttempts(0, w.now + 1000);
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[1].outcome == "Preempted");
  CHECK(attempts[1].lost_work_s == 0);
}

TEST_CASE("an agent's rank -1 exit for an attempt is a launch failure, retried after the backoff", "[controller]") {
  World w(1, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.ctl->OnAgentMessage("n1", PrepareOk(id, 1), w.now);
  w.ctl->OnAgentMessage("n1", Exited(id, 1, -1, 127), w.now + 1);
  auto info = w.Job(id);
  CHECK(info.state() == v1::PENDING);
  CHECK(info.reason() == "LaunchFailedRequeue");
}

TEST_CASE("fairshare usage accrues while jobs run and survives a restart", "[controller]") {
  World w(1, 2);
  core::PolicySet policy;  // associations are enforced: physics must list alice
  core::AccountPolicy physics;
  physics.name = "physics";
  physics.user_shares["alice"] = 1;
  policy.accounts = {physics};
  w.ctl->SetPolicy(policy);
  v1::JobSpec spec = Spec(1, 2);
  spec.set_account("physics");
  int64_t id = w.Submit(spec, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  w.ctl->RunCycle(w.now + 100);  // 100 s x 2 cores x billing weight 1 (default cpu weight)
  auto usage = w.ctl->Usage();
  REQUIRE(usage.count("physics/alice") == 1);
  double before = usage["physics/alice"];
  CHECK(before > 150);
  CHECK(before <= 200);
  w.ctl->OnAgentMessage("n1", Exited(id, 1, 0, 0), w.now + 100);
  w.RestartController(w.now + 101);  // closing the store flushes the writer queue
  Controller& again = *w.ctl;
  CHECK(again.Usage()["physics/alice"] == Approx(before));
}

TEST_CASE("pending jobs carry the cycle's priority, reason detail and expected start", "[controller]") {
  World w(1, 2);
  core::PolicySet policy;
  policy.backfill.mode = core::BackfillMode::kEasy;
  w.ctl->SetPolicy(policy);
  v1::JobSpec running = Spec(1, 2);
  running.set_time_limit_s(600);
  w.Submit(running, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  int64_t blocked = w.Submit(Spec(1, 2), w.alice);
  w.ctl->RunCycle(w.now + 1);
  auto info = w.Job(blocked);
  CHECK(info.state() == v1::PENDING);
  CHECK(info.reason() == "Resources");
  CHECK(info.expected_start() == w.now + 600);  // when the running job's time limit ends
}

TEST_CASE("QoS preemption: the low job is told to checkpoint, requeued on exit 75, and the high job starts", "[controller]") {
  World w(1, 2);
  w.ctl->SetPolicy(LowHighQosPolicy());
  v1::JobSpec lspec = Spec(1, 2);
  lspec.set_qos("low");
  int64_t victim = w.Submit(lspec, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  w.sink.Clear();
  v1::JobSpec hspec = Spec(1, 2);
  hspec.set_qos("high");
  int64_t preemptor = w.Submit(hspec, w.alice);
  w.ctl->RunCycle(w.now + 100);
  auto sig = w.sink.Of("n1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().job_id() == victim);
  CHECK(sig[0].signal().grace_s() == 30);
  CHECK(w.Job(preemptor).reason() == "Preempting");
  CHECK(w.Job(victim).reason() == "Preempting");
  w.ctl->RunCycle(w.now + 101);  // the victim is being preempted: not signalled twice
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).size() == 1);
  w.ctl->OnAgentMessage("n1", Exited(victim, 1, 0, 75), w.now + 105);
  auto v = w.Job(victim);
  CHECK(v.state() == v1::PENDING);
  CHECK(v.reason() == "Preempted");
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 106);
  CHECK(w.Job(preemptor).state() == v1::RUNNING);
  CHECK(w.Job(victim).state() == v1::PENDING);  // and it does not preempt back
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).empty());
}

TEST_CASE("fallback tier: a job waiting for h100 starts on a100 after its budget, tasks see MLSCHED_ACCELERATOR", "[controller]") {
  World w(0);
  w.ctl->OnRegister(NodeReg("a1", 8, 8, "a100"), w.now);
  w.ctl->OnRegister(NodeReg("h0", 8, 4, "h100"), w.now);  // h100s, too few for the job
  v1::JobSpec spec = Spec(1, 1, 8);
  spec.add_gpu_types("h100");
  auto* f = spec.add_fallback();
  f->set_accelerator("a100");
  f->set_after_s(600);
  int64_t id = w.Submit(spec, w.alice);  // feasible only through its fallback tier
  w.ctl->RunCycle(w.now + 599);
  CHECK(w.Job(id).state() == v1::PENDING);
  w.ctl->RunCycle(w.now + 600);
  REQUIRE(w.Job(id).state() == v1::RUNNING);
  auto prep = w.sink.Of("a1", v1::SchedulerMessage::kPrepare);
  REQUIRE(prep.size() == 1);
  CHECK(prep[0].prepare().env().at("MLSCHED_ACCELERATOR") == "a100");
  CHECK(prep[0].prepare().tasks(0).gpu_indices_size() == 8);
}

TEST_CASE("dependencies: afterok waits, starts after success, never after failure, bad ones are rejected", "[controller][dependency]") {
  World w(2, 4);
  int64_t a = w.Submit(Spec(1), w.alice);
  v1::JobSpec after_ok = Spec(1);
  after_ok.set_dependency("afterok:" + std::to_string(a));
  int64_t b = w.Submit(after_ok, w.alice);
  w.ctl->RunCycle(w.now);
  w.ctl->RunCycle(w.now);
  CHECK(w.Job(b).state() == v1::PENDING);
  CHECK(w.Job(b).reason() == "Dependency");
  CHECK(w.Job(b).reason_detail() == "afterok:" + std::to_string(a) + " (job " + std::to_string(a) + " is RUNNING)");
  CHECK(w.Job(b).spec().dependency() == "afterok:" + std::to_string(a));
  w.PrepareAndStartAll();
  w.ctl->OnAgentMessage(w.Job(a).tasks(0).node(), Exited(a, 1, 0, 0), w.now + 1);
  REQUIRE(w.Job(a).state() == v1::COMPLETED);
  // a ends and leaves memory (MinJobAge); b still knows how it ended.
  v1::JobSpec held = after_ok;
  held.set_hold(true);
  int64_t c = w.Submit(held, w.alice);
  for (const char* n : {"n1", "n2"}) w.ctl->OnAgentMessage(n, Heartbeat({}), w.now + w.cfg.min_job_age_s + 10);
  w.ctl->Tick(w.now + w.cfg.min_job_age_s + 10);
  CHECK(w.ctl->JobsInMemory() == 2);
  w.ctl->RunCycle(w.now + w.cfg.min_job_age_s + 10);
  CHECK(w.Job(b).state() == v1::RUNNING);
  REQUIRE(w.ctl->Hold(w.alice, c, true, w.now).ok());
  w.ctl->RunCycle(w.now + w.cfg.min_job_age_s + 11);
  CHECK(w.Job(c).state() == v1::RUNNING);

  v1::JobSpec not_ok = Spec(1);
  not_ok.set_dependency("afternotok:" + std::to_string(a) + ",afterany:" + std::to_string(b));
  int64_t d = w.Submit(not_ok, w.alice);
  w.ctl->RunCycle(w.now + w.cfg.min_job_age_s + 12);
  CHECK(w.Job(d).reason() == "DependencyNeverSatisfied");

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"afterok:999", "job 999: no such job"},
           {"afterok:" + std::to_string(a) + "_3", "is not a job array"},
           {"afterok", "needs job ids"},
           {"before:1", "unknown dependency type 'before'"}}) {
    v1::JobSpec bad = Spec(1);
    bad.set_dependency(text);
    int64_t id = 0;
    Status st = w.ctl->Submit(w.alice, bad, w.now, &id);
    INFO(text << " -> " << st.message);
    CHECK(st.code == Status::kInvalidArgument);
    CHECK_THAT(st.message, Catch::Contains(want));
  }
}

TEST_CASE("a dependency on a job that is held or waits out its requeue backoff still waits", "[controller][dependency]") {
  World w(2, 1);
  int64_t a = w.Submit(Spec(1), w.alice);
  w.ctl->RunCycle(w.now);
  REQUIRE(w.Job(a).state() == v1::RUNNING);
  const std::string node = w.Job(a).tasks(0).node();
  v1::AgentMessage failed = PrepareOk(a, 1);
  failed.mutable_prepare_result()->set_ok(false);
  failed.mutable_prepare_result()->set_error("workdir missing");
  w.ctl->OnAgentMessage(node, failed, w.now);
  REQUIRE(w.Job(a).state() == v1::PENDING);  // requeued: not eligible until the backoff ends
  v1::JobSpec after_ok = Spec(1);
  after_ok.set_dependency("afterok:" + std::to_string(a));
  int64_t b = w.Submit(after_ok, w.alice);
  v1::JobSpec held = Spec(1);
  held.set_hold(true);
  int64_t c = w.Submit(held, w.alice);
  v1::JobSpec after_held = Spec(1);
  after_held.set_dependency("afterany:" + std::to_string(c));
  int64_t d = w.Submit(after_held, w.alice);
  w.ctl->RunCycle(w.now + 1);
  CHECK(w.Job(b).state() == v1::PENDING);
  CHECK(w.Job(b).reason() == "Dependency");
  CHECK(w.Job(b).reason_detail() == "afterok:" + std::to_string(a) + " (job " + std::to_string(a) + " is PENDING)");
  CHECK(w.Job(c).reason() == "JobHeldUser");
  CHECK(w.Job(d).state() == v1::PENDING);
  CHECK(w.Job(d).reason() == "Dependency");
  // After the backoff a runs again; b still waits for it to succeed.
  w.ctl->RunCycle(w.now + w.cfg.requeue_backoff_s + 1);
  CHECK(w.Job(a).state() == v1::RUNNING);
  CHECK(w.Job(b).state() == v1::PENDING);
}

TEST_CASE("a held job leaves the cycle: nothing planned stays shown, and a release brings it back", "[controller][hold]") {
  World w(1, 1);
  core::PolicySet policy;
  policy.backfill.mode = core::BackfillMode::kEasy;
  policy.queue_order = core::QueueOrder::kMultifactor;
  policy.weights.fairshare = 1000;
  w.ctl->SetPolicy(policy);
  v1::JobSpec limited = Spec(1);
  limited.set_time_limit_s(600);
  int64_t busy = w.Submit(limited, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  int64_t waiting = w.Submit(Spec(1), w.alice);
  w.ctl->RunCycle(w.now);
  REQUIRE(w.Job(busy).state() == v1::RUNNING);
  REQUIRE(w.Job(waiting).reason() == "Resources");
  REQUIRE(w.Job(waiting).expected_start() > 0);
  REQUIRE(w.Job(waiting).priority() > 0);
  REQUIRE(w.ctl->Hold(w.alice, waiting, false, w.now).ok());
  for (int i = 1; i <= 2; ++i) {
    w.ctl->RunCycle(w.now + i);
    CHECK(w.Job(waiting).reason() == "JobHeldUser");
    CHECK(w.Job(waiting).reason_detail().empty());
    CHECK(w.Job(waiting).expected_start() == 0);
    CHECK(w.Job(waiting).priority() == 0);
  }
  REQUIRE(w.ctl->Hold(w.alice, waiting, true, w.now + 3).ok());
  w.ctl->RunCycle(w.now + 3);
  CHECK(w.Job(waiting).reason() == "Resources");
  CHECK(w.Job(waiting).expected_start() > 0);
}

TEST_CASE("job arrays: one spec, consecutive elements, %N running, cancel by array or element", "[controller][array]") {
  World w(2, 8);
  v1::JobSpec spec = Spec(1);
  spec.set_array("0-5%2");
  int64_t first = w.Submit(spec, w.alice);
  v1::ListJobsRequest all;
  auto listed = ListAll(*w.ctl, Root(), all);
  REQUIRE(listed.size() == 6);
  for (int i = 0; i < 6; ++i) {
    CHECK(listed[i].job_id() == first + i);
    CHECK(listed[i].spec().array_index().array_job_id() == first);
    CHECK(listed[i].spec().array_index().task_id() == i);
  }
  w.ctl->RunCycle(w.now);
  CHECK(w.Job(first).state() == v1::RUNNING);
  CHECK(w.Job(first + 1).state() == v1::RUNNING);
  CHECK(w.Job(first + 2).reason() == "JobArrayTaskLimit");
  auto prep = w.sink.Of(w.Job(first).tasks(0).node(), v1::SchedulerMessage::kPrepare);
  REQUIRE_FALSE(prep.empty());
  CHECK(prep[0].prepare().spec().array_index().task_count() == 6);
  CHECK(prep[0].prepare().spec().array_index().task_max() == 5);

  // A dependency on the array id waits for every element.
  v1::JobSpec after = Spec(1);
  after.set_dependency("afterany:" + std::to_string(first));
  int64_t gather = w.Submit(after, w.alice);
  CHECK(w.Job(gather).spec().dependency() == "afterany:" + std::to_string(first));  // as written
  REQUIRE(w.Job(gather).spec().dependencies_size() == 1);
  CHECK(w.Job(gather).spec().dependencies(0).job_ids_size() == 6);  // resolved
  v1::ListJobsRequest gather_only;
  gather_only.add_job_ids(gather);
  CHECK(ListAll(*w.ctl, Root(), gather_only).at(0).spec().dependency() ==
        "afterany:" + std::to_string(first) + ":" + std::to_string(first + 1) + ":" + std::to_string(first + 2) + ":" +
            std::to_string(first + 3) + ":" + std::to_string(first + 4) + ":" + std::to_string(first + 5));

  v1::CancelJobsRequest one;
  one.add_job_refs(std::to_string(first) + "_4");
  auto resp = w.ctl->Cancel(w.alice, one, w.now);
  REQUIRE(resp.cancelled_size() == 1);
  CHECK(resp.cancelled(0) == first + 4);
  v1::ListJobsRequest by_ref;
  by_ref.add_job_refs(std::to_string(first) + "_4");
  REQUIRE(ListAll(*w.ctl, Root(), by_ref).size() == 1);
  CHECK(ListAll(*w.ctl, Root(), by_ref)[0].state() == v1::CANCELLED);
  v1::CancelJobsRequest missing;
  missing.add_job_refs(std::to_string(first) + "_9");
  CHECK_THAT(w.ctl->Cancel(w.alice, missing, w.now).errors(0), Catch::Contains("has no element 9"));
  v1::CancelJobsRequest whole;
  whole.add_job_ids(first);
  resp = w.ctl->Cancel(w.alice, whole, w.now);
  CHECK(resp.cancelled_size() == 5);  // 0-3 and 5; 4 is already cancelled
  w.ctl->RunCycle(w.now + 1);
  CHECK(w.Job(gather).state() == v1::RUNNING);

  v1::JobSpec bad = Spec(1);
  bad.set_array("0-20000");
  int64_t id = 0;
  Status st = w.ctl->Submit(w.alice, bad, w.now, &id);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("more than 10000 elements"));
}

TEST_CASE("spot default: allow when the job checkpoints, else never, bad values are rejected", "[controller][spot]") {
  World w(1, 4);
  CHECK(w.Job(w.Submit(Spec(1), w.alice)).spec().spot() == "never");
  v1::JobSpec ckpt = Spec(1);
  ckpt.set_checkpoint_interval_s(600);
  CHECK(w.Job(w.Submit(ckpt, w.alice)).spec().spot() == "allow");
  v1::JobSpec pref = Spec(1);
  pref.set_spot("prefer");
  CHECK(w.Job(w.Submit(pref, w.alice)).spec().spot() == "prefer");
  for (const auto& [mutate, want] : std::vector<std::pair<std::function<void(v1::JobSpec&)>, std::string>>{
           {[](v1::JobSpec& s) { s.set_spot("sometimes"); }, "unknown spot preference 'sometimes'"},
           {[](v1::JobSpec& s) { s.set_region_strict(true); }, "region_strict needs a data region"},
           {[](v1::JobSpec& s) { s.set_checkpoint_interval_s(-5); }, "checkpoint interval must be >= 0"}}) {
    v1::JobSpec bad = Spec(1);
    mutate(bad);
    int64_t id = 0;
    Status st = w.ctl->Submit(w.alice, bad, w.now, &id);
    CHECK(st.code == Status::kInvalidArgument);
    CHECK_THAT(st.message, Catch::Contains(want));
  }
}

TEST_CASE("dependencies on jobs and array elements that left memory resolve from rows loaded without the lock", "[server][deps]") {
  World w;
  v1::JobSpec arr = Spec(1);
  arr.set_array("0-3");
  arr.set_hold(true);
  int64_t a = w.Submit(arr, w.alice);
  int64_t single = w.Submit(Spec(1), w.alice);
  v1::CancelJobsRequest cancel;
  cancel.add_job_ids(a);
  cancel.add_job_ids(single);
  REQUIRE(w.ctl->Cancel(w.alice, cancel, w.now).cancelled_size() == 5);
  w.ctl->Tick(w.now + w.cfg.min_job_age_s + 10);
  REQUIRE(w.ctl->JobsInMemory() == 0);  // all five are on disk only now

  auto deps_of = [&](const std::string& text) {
    v1::JobSpec s = Spec(1);
    s.set_dependency(text);
    s.set_hold(true);
    int64_t id = 0;
    Status st = w.ctl->Submit(w.alice, s, w.now + w.cfg.min_job_age_s + 10, &id);
    INFO(text << " -> " << st.message);
    REQUIRE(st.ok());
    return w.Job(id).spec().dependency();
  };
  // The element with task id 2 of the array, every element, and a plain job: all from disk (shown
  // as mlq shows them: elements as ARRAY_TASK, a whole array by its id).
  CHECK(deps_of("afterany:" + std::to_string(a) + "_2") == "afterany:" + std::to_string(a) + "_2");
  CHECK(deps_of("afterany:" + std::to_string(a)) == "afterany:" + std::to_string(a));
  CHECK(deps_of("afterany:" + std::to_string(single)) == "afterany:" + std::to_string(single));
  v1::JobSpec bad = Spec(1);
  bad.set_dependency("afterok:" + std::to_string(a) + "_9");
  int64_t id = 0;
  Status st = w.ctl->Submit(w.alice, bad, w.now + w.cfg.min_job_age_s + 10, &id);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("has no element 9"));
}
