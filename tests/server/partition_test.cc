// A rank that fails because a peer's node went silent (a network partition cut it off) must not
// fail the job, nor requeue it while the cut-off rank may still run: the verdict waits for the
// silent node (issue 35, partition case (c)). Driven without sockets through the recording sink.
#include <catch2/catch.hpp>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;

namespace {

constexpr int kPeerLost = 76;  // mltrain's "a peer did not arrive or died"

// A 2-rank gang on two of three 1-CPU nodes, running at w.now; both its nodes heartbeat up to +5.
struct Gang {
  NodesWorld w{3, 1};
  int64_t id = 0;
  v1::JobInfo info;
  std::string node0, node1;  // rank 0's and rank 1's nodes
  std::string spare;         // the third node, idle
  Gang() {
    REQUIRE(w.cfg.heartbeat_interval_s == 5);  // silent: no word for more than 11 s
    id = w.Submit(Spec(2, 1), w.alice);
    w.ctl->RunCycle(w.now);
    w.PrepareAndStartAll();
    info = w.Job(id);
    REQUIRE(info.state() == v1::RUNNING);
    node0 = info.tasks(0).node();
    node1 = info.tasks(1).node();
    for (const char* n : {"n1", "n2", "n3"})
      if (n != node0 && n != node1) spare = n;
    Beat(node0, 5);
    Beat(node1, 5);
  }
  int32_t Rank(int i) const { return info.tasks(i).rank(); }
  // `node` heartbeats at w.now + t listing its rank of the gang.
  void Beat(const std::string& node, int64_t t) {
    const int32_t rank = node == node0 ? Rank(0) : Rank(1);
    w.ctl->OnAgentMessage(node, Heartbeat({{id, 1, rank}}), w.now + t);
  }
};

}  // namespace

TEST_CASE("a rank that fails while a peer's node is silent waits for it and is requeued when the node is DOWN",
          "[controller][partition]") {
  Gang g;
  // node1 is cut off after +5: its stream drops, its heartbeats stop; node0 still speaks.
  g.w.ctl->OnDisconnect(g.node1, g.w.now + 8);
  for (int64_t t = 10; t <= 20; t += 5) g.Beat(g.node0, t);
  // node1's agent stops its rank at its cut-off; the connection's close reaches rank 0: peer lost.
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 21);
  auto mid = g.w.Job(g.id);
  CHECK(mid.state() == v1::RUNNING);  // not FAILED, not requeued while node1's rank may still run
  auto events = EventsOf(g.w.dir, g.id);
  CHECK(HasEvent(events, "AWAIT_NODE|rank " + std::to_string(g.Rank(0)) + " exited 76 while node " + g.node1 +
                             " is silent"));
  g.w.ctl->Tick(g.w.now + 30);
  CHECK(g.w.Job(g.id).state() == v1::RUNNING);
  // 30 s without a heartbeat (the heartbeat timeout): node1 is DOWN and the job requeued.
  for (int64_t t = 5; t <= 40; t += 5) g.w.ctl->OnAgentMessage(g.spare, Heartbeat({}), g.w.now + t);
  for (int64_t t = 25; t <= 40; t += 5) g.w.ctl->OnAgentMessage(g.node0, Heartbeat({}), g.w.now + t);
  g.w.ctl->Tick(g.w.now + 40);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeFail");
  auto attempts = g.w.store->LoadAttempts(0, g.w.now + 1000);
  REQUIRE(attempts.size() == 1);
  CHECK(attempts[0].outcome == "NodeFail");
  // The next attempt starts afresh: no verdict waits in it.
  g.w.sink.Clear();
  g.w.ctl->RunCycle(g.w.now + 41);
  g.w.PrepareAndStartAll(g.w.now + 41, g.w.now + 41);
  auto again = g.w.Job(g.id);
  REQUIRE(again.state() == v1::RUNNING);
  CHECK(again.attempt() == 2);
  for (const auto& t : again.tasks()) CHECK(t.node() != g.node1);
  g.w.ctl->Tick(g.w.now + 42);
  CHECK(g.w.Job(g.id).state() == v1::RUNNING);
}

TEST_CASE("a rank failed behind a silent peer: the job is requeued when that node speaks again, its rank stopped",
          "[controller][partition]") {
  Gang g;
  for (int64_t t = 10; t <= 20; t += 5) g.Beat(g.node0, t);  // node1 silent since +5, stream up
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 20);
  REQUIRE(g.w.Job(g.id).state() == v1::RUNNING);
  // Ticks while the node stays silent change nothing.
  g.w.sink.Clear();
  g.w.ctl->Tick(g.w.now + 21);
  CHECK(g.w.Job(g.id).state() == v1::RUNNING);
  // The partition heals: node1 heartbeats with its rank still running; the gang is broken.
  g.Beat(g.node1, 24);
  g.w.ctl->Tick(g.w.now + 25);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeFail");
  auto kill = g.w.sink.Of(g.node1, v1::SchedulerMessage::kSignal);  // its rank is stopped (and fenced)
  REQUIRE(kill.size() == 1);
  CHECK(kill[0].signal().kill());
  auto events = EventsOf(g.w.dir, g.id);
  CHECK(HasEvent(events, "NODE_FAIL|a rank failed while node " + g.node1 + " was silent; then node " + g.node1 +
                             " speaks again"));
}

TEST_CASE("a rank failed behind a silent peer: that peer's own exit report requeues the job", "[controller][partition]") {
  Gang g;
  for (int64_t t = 10; t <= 20; t += 5) g.Beat(g.node0, t);
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 20);
  REQUIRE(g.w.Job(g.id).state() == v1::RUNNING);
  // node1's agent comes back and reports the rank its cut-off stopped (SIGTERM: 143).
  g.w.ctl->OnAgentMessage(g.node1, Exited(g.id, 1, g.Rank(1), 143), g.w.now + 22);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeFail");
}

TEST_CASE("a rank's own failure while every peer speaks fails the job at once", "[controller][partition]") {
  Gang g;
  for (int64_t t = 10; t <= 20; t += 5) {
    g.Beat(g.node0, t);
    g.Beat(g.node1, t);
  }
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 21);
  CHECK(g.w.Job(g.id).state() == v1::COMPLETING);  // failed; the other rank is being stopped
  g.w.ctl->OnAgentMessage(g.node1, Exited(g.id, 1, g.Rank(1), 143), g.w.now + 22);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::FAILED);
  CHECK(after.exit_code() == kPeerLost);
  CHECK_FALSE(HasEvent(EventsOf(g.w.dir, g.id), "AWAIT_NODE|rank " + std::to_string(g.Rank(0)) + " exited 76 while node " +
                                                     g.node1 + " is silent"));
}

TEST_CASE("restart: a verdict waiting on a silent node waits again and requeues once that node registers",
          "[controller][partition]") {
  Gang g;
  for (int64_t t = 10; t <= 20; t += 5) g.Beat(g.node0, t);
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 20);
  REQUIRE(g.w.Job(g.id).state() == v1::RUNNING);
  g.w.RestartController(g.w.now + 22);
  g.w.ctl->OnRegister(NodeReg(g.node0, 1), g.w.now + 23);
  g.w.ctl->Tick(g.w.now + 23);
  CHECK(g.w.Job(g.id).state() == v1::RUNNING);  // node1 not heard yet
  auto reg = NodeReg(g.node1, 1);
  auto* r = reg.add_running();
  r->set_job_id(g.id);
  r->set_attempt(1);
  r->set_rank(g.Rank(1));
  g.w.ctl->OnRegister(reg, g.w.now + 24);
  g.w.ctl->Tick(g.w.now + 24);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeFail");
}

TEST_CASE("restart: a rank's failure reported before its peers registered again is its own: the job fails",
          "[controller][partition]") {
  Gang g;
  g.w.RestartController(g.w.now + 8);
  // rank 0's agent registers first and reports the failure it kept in its outbox meanwhile;
  // rank 1's agent has not registered yet, which is a restart, not a silence.
  auto reg = NodeReg(g.node0, 1);
  g.w.ctl->OnRegister(reg, g.w.now + 9);
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), 1), g.w.now + 9);
  CHECK(g.w.Job(g.id).state() == v1::COMPLETING);  // failed; rank 1 is being stopped
}

TEST_CASE("an agent whose stream drops counts as silent at once: its peer's failure waits for it", "[controller][partition]") {
  Gang g;
  g.w.ctl->OnDisconnect(g.node1, g.w.now + 6);  // its agent died: its rank dies with it
  g.w.ctl->OnAgentMessage(g.node0, Exited(g.id, 1, g.Rank(0), kPeerLost), g.w.now + 7);
  CHECK(g.w.Job(g.id).state() == v1::RUNNING);
  // The agent is back (restarted by systemd) without the rank: the job is requeued, not failed.
  g.w.ctl->OnRegister(NodeReg(g.node1, 1), g.w.now + 9);
  g.w.ctl->Tick(g.w.now + 9);
  auto after = g.w.Job(g.id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeFail");
}
