// Node liveness and reconciliation in the controller: silent and DOWN nodes, streams that lag or
// break, agents re-registering after a break or a schedd restart (what they report is kept, what
// they lost is requeued, nothing runs twice). A recording sink plays the agents' side.
#include <catch2/catch.hpp>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;

TEST_CASE("a silent node goes DOWN and its jobs are requeued on the others", "[controller]") {
  NodesWorld w(3, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  std::set<std::string> used;
  for (const auto& t : info.tasks()) used.insert(t.node());
  std::string dead = *used.begin();
  // Every node but the dead one keeps beating.
  int64_t later = w.now + w.cfg.heartbeat_timeout_s + 1;
  for (const char* n : {"n1", "n2", "n3"}) {
    if (n == dead) continue;
    std::vector<std::tuple<int64_t, int32_t, int32_t>> running;
    for (const auto& t : info.tasks())
      if (t.node() == n) running.push_back({id, 1, t.rank()});
    w.ctl->OnAgentMessage(n, Heartbeat(running), later);
  }
  w.ctl->Tick(later);
  const v1::JobInfo before = info;
  info = w.Job(id);
  CHECK(info.state() == v1::PENDING);  // NODE_FAIL, requeued
  CHECK(info.requeue_count() == 1);
  REQUIRE(before.tasks_size() == 2);
  for (const auto& t : before.tasks())
    if (t.node() != dead) CHECK(w.sink.Of(t.node(), v1::SchedulerMessage::kSignal).size() == 1);  // survivor killed
  auto nodes = w.ctl->Nodes();
  for (const auto& n : nodes)
    if (n.name() == dead) CHECK(n.state() == "DOWN");
}

TEST_CASE("a node whose stream still delivers is not DOWN while the controller is behind on its heartbeats",
          "[controller][scale]") {
  // Issue 30: heartbeats queued behind a node's reports reached the controller > 30 s late and
  // live nodes went DOWN. The gateway tells when the node's stream last delivered (or that its
  // messages wait); the timeout counts from the later of that and the last heartbeat handled.
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const std::string node = w.Job(id).tasks(0).node();
  const std::string other = node == "n1" ? "n2" : "n1";
  const int64_t later = w.now + w.cfg.heartbeat_timeout_s + 1;
  w.sink.heard[node] = later;  // its messages are still waiting to be handled
  w.ctl->Tick(later);
  for (const auto& n : w.ctl->Nodes()) {
    if (n.name() == node) CHECK(n.state() != "DOWN");
    if (n.name() == other) CHECK(n.state() == "DOWN");  // silent and nothing heard: DOWN as before
  }
  CHECK(w.Job(id).state() == v1::RUNNING);
  // Heard long ago: DOWN.
  w.sink.heard[node] = w.now;
  w.ctl->Tick(later + 1);
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == node) CHECK(n.state() == "DOWN");
}

TEST_CASE("a message from a DOWN node is not acted upon and asks for its stream to be closed", "[controller][scale]") {
  // A DOWN node's tasks were requeued; its late reports must not touch the new attempts, and
  // its agent must register again (which reconciles what still runs there) instead of staying
  // DOWN behind a live stream, as 872 of 1,000 nodes did in issue 30.
  NodesWorld w(1, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const int64_t later = w.now + w.cfg.heartbeat_timeout_s + 1;
  w.ctl->Tick(later);
  REQUIRE(w.ctl->Nodes()[0].state() == "DOWN");
  REQUIRE(w.Job(id).state() == v1::PENDING);
  CHECK_FALSE(w.ctl->OnAgentMessage("n1", Heartbeat({{id, 1, 0}}), later + 1));
  CHECK(w.Job(id).state() == v1::PENDING);
  // Registering again brings it back.
  w.ctl->OnRegister(NodeReg("n1", 1), later + 2);
  CHECK(w.ctl->Nodes()[0].state() != "DOWN");
  CHECK(w.ctl->OnAgentMessage("n1", Heartbeat({}), later + 3));
}

TEST_CASE("restart: a rank's acknowledged exit survives it, the gang completes once, not requeued as vanished",
          "[controller][recovery]") {
  // Found by the partition test of issue 35 (tests/e2e/hosts_ha_e2e.sh): rank 1 exited 0 and its
  // report was acknowledged, but only memory knew; the leader changed before rank 0 exited, the new
  // one thought rank 1 still ran, its node re-registered without it ("vanished"), and the job that
  // had finished was requeued and run again.
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  v1::JobInfo info = w.Job(id);
  REQUIRE(info.tasks_size() == 2);
  const std::string node0 = info.tasks(0).node(), node1 = info.tasks(1).node();
  // rank 1 finishes first; the agent gateway acknowledges the report once this returns
  REQUIRE(w.ctl->OnAgentMessage(node1, Exited(id, 1, info.tasks(1).rank(), 0), w.now + 5));
  REQUIRE(w.Job(id).state() == v1::RUNNING);
  // schedd dies (or another replica takes over): a new controller on the same store
  w.RestartController(w.now + 10);
  Controller& ctl = *w.ctl;
  // both agents come back: rank 1's node runs nothing (its task ended), rank 0 still runs
  auto reg0 = NodeReg(node0, 1);
  auto* r = reg0.add_running();
  r->set_job_id(id);
  r->set_attempt(1);
  r->set_rank(info.tasks(0).rank());
  ctl.OnRegister(reg0, w.now + 11);
  ctl.OnRegister(NodeReg(node1, 1), w.now + 11);
  for (int t = 12; t < 16; ++t) {
    ctl.OnAgentMessage(node1, Heartbeat({}), w.now + t);
    ctl.OnAgentMessage(node0, Heartbeat({{id, 1, info.tasks(0).rank()}}), w.now + t);
  }
  v1::JobInfo mid;
  REQUIRE(ctl.Get(Root(), id, &mid).ok());
  CHECK(mid.state() == v1::RUNNING);  // not requeued: rank 1's exit was durable
  CHECK(mid.requeue_count() == 0);
  ctl.OnAgentMessage(node0, Exited(id, 1, info.tasks(0).rank(), 0), w.now + 20);
  v1::JobInfo done;
  REQUIRE(ctl.Get(Root(), id, &done).ok());
  CHECK(done.state() == v1::COMPLETED);
  CHECK(done.attempt() == 1);
}

TEST_CASE("restart: running jobs are recovered and reconciled with the agents", "[controller]") {
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  int64_t pending = w.Submit(Spec(1, 1), w.alice);  // no room while the gang runs: stays pending
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  // schedd dies: a new controller on the same store.
  w.RestartController(w.now + 10);
  Controller& ctl = *w.ctl;
  v1::JobInfo info;
  REQUIRE(ctl.Get(Root(), id, &info).ok());
  CHECK(info.state() == v1::RUNNING);
  REQUIRE(ctl.Get(Root(), pending, &info).ok());
  CHECK(info.state() == v1::PENDING);
  // n1 still runs its rank; n2 lost its task while schedd was down.
  REQUIRE(ctl.Get(Root(), id, &info).ok());
  auto reg1 = NodeReg(info.tasks(0).node(), 1);
  auto* r = reg1.add_running();
  r->set_job_id(id);
  r->set_attempt(1);
  r->set_rank(info.tasks(0).rank());
  auto keep = ctl.OnRegister(reg1, w.now + 11);
  REQUIRE(keep.keep_size() == 1);
  CHECK(keep.keep(0).job_id() == id);
  ctl.OnRegister(NodeReg(info.tasks(1).node(), 1), w.now + 11);
  ctl.RunCycle(w.now + 11);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kPrepare).empty());  // nothing is run twice
  CHECK(w.sink.Of("n2", v1::SchedulerMessage::kPrepare).empty());
  const std::string lost_node = info.tasks(1).node();
  ctl.OnAgentMessage(lost_node, Heartbeat({}), w.now + 12);
  ctl.OnAgentMessage(lost_node, Heartbeat({}), w.now + 13);
  v1::JobInfo after;
  REQUIRE(ctl.Get(Root(), id, &after).ok());
  CHECK(after.state() == v1::PENDING);  // requeued
  CHECK(after.requeue_count() == 1);
  CHECK(w.sink.Of(info.tasks(0).node(), v1::SchedulerMessage::kSignal).size() == 1);  // the surviving rank is killed
}

TEST_CASE("a commit lost with the agent's stream: the node re-registers without the task, which is requeued, not "
          "left running until its time limit", "[controller]") {
  // Seen in the scale smoke on a starved machine: 751 of 1,000 hollow agents lost their streams to
  // keepalive timeouts right after their tasks were committed; 30 came back without the tasks
  // whose commits died with the old stream, and 748 jobs stayed RUNNING for their whole time limit.
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  const std::string node = w.Job(id).tasks(0).node();
  w.ctl->OnAgentMessage(node, PrepareOk(id, 1), w.now);
  REQUIRE(w.sink.Of(node, v1::SchedulerMessage::kCommit).size() == 1);  // sent: the stream then breaks
  // The agent reconnects with nothing running (it dropped the prepared task with the old stream)
  // and nothing left to report.
  w.ctl->OnRegister(NodeReg(node, 1), w.now + 1);
  CHECK(w.Job(id).state() == v1::RUNNING);  // its exit could still be on the way
  w.ctl->OnAgentMessage(node, Heartbeat({}), w.now + 2);
  w.ctl->OnAgentMessage(node, Heartbeat({}), w.now + 3);
  const v1::JobInfo after = w.Job(id);
  CHECK(after.state() == v1::PENDING);  // NodeFail: requeued long before its time limit
  CHECK(after.requeue_count() == 1);
}

TEST_CASE("a commit whose task did start is kept when the node re-registers reporting it", "[controller]") {
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  const std::string node = w.Job(id).tasks(0).node();
  w.ctl->OnAgentMessage(node, PrepareOk(id, 1), w.now);
  auto reg = NodeReg(node, 1);  // the task started; its task-started report died with the stream
  auto* r = reg.add_running();
  r->set_job_id(id);
  r->set_attempt(1);
  r->set_rank(0);
  CHECK(w.ctl->OnRegister(reg, w.now + 1).keep_size() == 1);
  for (int i = 2; i < 6; ++i) w.ctl->OnAgentMessage(node, Heartbeat({{id, 1, 0}}), w.now + i);
  CHECK(w.Job(id).state() == v1::RUNNING);
  CHECK(w.Job(id).requeue_count() == 0);
}
