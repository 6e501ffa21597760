// Node health in schedd (controller_health.cc): a heartbeat's failing checks drain the node with
// them as the reason, [health] drain-and-requeue checkpoint-requeues its jobs elsewhere, and a
// node drained for health returns once its checks pass (auto_resume); an operator's drain stays.
#include <catch2/catch.hpp>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

v1::AgentMessage HealthBeat(std::vector<std::tuple<int64_t, int32_t, int32_t>> running,
                            std::vector<std::pair<std::string, std::string>> problems, int64_t checked_at = 1) {
  v1::AgentMessage m = Heartbeat(std::move(running));
  m.mutable_heartbeat()->mutable_health()->set_checked_at(checked_at);
  for (const auto& [check, reason] : problems) {
    auto* p = m.mutable_heartbeat()->mutable_health()->add_problems();
    p->set_check(check);
    p->set_reason(reason);
  }
  return m;
}

v1::NodeInfo NodeOf(Controller& ctl, const std::string& name) {
  for (const auto& n : ctl.Nodes())
    if (n.name() == name) return n;
  FAIL("no node " << name);
  return {};
}

}  // namespace

TEST_CASE("a failing health check drains the node with its reason, running jobs keep running by default", "[controller][health]") {
  NodesWorld w(2, 1);
  int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const std::string node = w.Job(id).tasks(0).node();
  w.sink.Clear();
  w.ctl->OnAgentMessage(node, HealthBeat({{id, 1, 0}}, {{"xid", "GPU 1 XID 79 (fallen off the bus)"}}), w.now + 5);
  auto n = NodeOf(*w.ctl, node);
  CHECK(n.state() == "DRAINING");
  CHECK(n.reason() == "health: xid: GPU 1 XID 79 (fallen off the bus)");
  REQUIRE(n.health_problems_size() == 1);
  CHECK(w.sink.Of(node, v1::SchedulerMessage::kSignal).empty());  // action "drain": the job runs on
  CHECK(w.Job(id).state() == v1::RUNNING);
  CHECK(HasEvent(EventsOf(w.dir, 0), "drain|health: xid: GPU 1 XID 79 (fallen off the bus)"));
  // Nothing new lands there.
  int64_t next = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now + 6);
  REQUIRE(w.Job(next).state() == v1::RUNNING);
  CHECK(w.Job(next).tasks(0).node() != node);
  // Passing again: resumed (auto_resume), with an event.
  w.ctl->OnAgentMessage(node, HealthBeat({{id, 1, 0}}, {}), w.now + 10);
  n = NodeOf(*w.ctl, node);
  CHECK(n.reason().empty());
  CHECK(n.state() != "DRAINING");
  CHECK(HasEvent(EventsOf(w.dir, 0), "resume|health checks pass again (auto_resume)"));
}

TEST_CASE("drain-and-requeue checkpoint-requeues the node's jobs, which restart without it", "[controller][health]") {
  NodesWorld w(3, 1);
  auto policy = PolicyFromText("[health]\naction = \"drain-and-requeue\"\nrequeue_grace = \"90s\"\nauto_resume = false\n", "p.toml");
  w.ctl->SetPolicy(policy);
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  const std::string bad = info.tasks(0).node();
  w.sink.Clear();
  w.ctl->OnAgentMessage(bad, HealthBeat({{id, 1, info.tasks(0).rank()}}, {{"ecc", "GPU 0: 2 uncorrectable ECC error(s)"}}), w.now + 5);
  for (const auto& t : info.tasks()) {  // the whole gang is asked to checkpoint and stop
    auto sig = w.sink.Of(t.node(), v1::SchedulerMessage::kSignal);
    REQUIRE(sig.size() == 1);
    CHECK(sig[0].signal().kill());
    CHECK(sig[0].signal().grace_s() == 90);
    CHECK(sig[0].signal().reason() == "node-health");
  }
  CHECK(w.Job(id).reason() == "NodeHealth");
  // The same verdict again: no second signal.
  w.sink.Clear();
  w.ctl->OnAgentMessage(bad, HealthBeat({{id, 1, info.tasks(0).rank()}}, {{"ecc", "GPU 0: 2 uncorrectable ECC error(s)"}}), w.now + 6);
  CHECK(w.sink.Of(bad, v1::SchedulerMessage::kSignal).empty());
  // The rank on the broken GPU dies of it (exit 1), not of the SIGTERM: requeued all the same.
  w.ctl->OnAgentMessage(bad, Exited(id, 1, info.tasks(0).rank(), 1), w.now + 7);
  w.ctl->OnAgentMessage(info.tasks(1).node(), Exited(id, 1, info.tasks(1).rank(), 75), w.now + 8);
  auto after = w.Job(id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "NodeHealth");
  auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "node-health|health: ecc: GPU 0: 2 uncorrectable ECC error(s); checkpoint and requeue, grace 90 s"));
  w.ctl->RunCycle(w.now + 9);
  auto again = w.Job(id);
  REQUIRE(again.state() == v1::RUNNING);
  for (const auto& t : again.tasks()) CHECK(t.node() != bad);
  // auto_resume off: passing again leaves the drain to an operator.
  w.ctl->OnAgentMessage(bad, HealthBeat({}, {}), w.now + 10);
  CHECK(NodeOf(*w.ctl, bad).state() == "DRAIN");
  REQUIRE(w.ctl->Drain(Root(), bad, "", true).ok());
  CHECK(NodeOf(*w.ctl, bad).state() == "IDLE");
}

TEST_CASE("an operator's drain is kept through health verdicts, and what an agent reports is bounded", "[controller][health][security]") {
  NodesWorld w(1, 1);
  REQUIRE(w.ctl->Drain(Root(), "n1", "replacing a PSU", false).ok());
  w.ctl->OnAgentMessage("n1", HealthBeat({}, {{"disk", "/var/lib/mlsched: 0.1 GiB free"}}), w.now + 1);
  CHECK(NodeOf(*w.ctl, "n1").reason() == "replacing a PSU");
  w.ctl->OnAgentMessage("n1", HealthBeat({}, {}), w.now + 2);
  CHECK(NodeOf(*w.ctl, "n1").reason() == "replacing a PSU");  // not resumed: not drained for health
  REQUIRE(w.ctl->Drain(Root(), "n1", "", true).ok());
  // A hostile agent: 1,000 problems, huge reasons with terminal escapes.
  std::vector<std::pair<std::string, std::string>> flood;
  for (int i = 0; i < 1000; ++i) flood.push_back({std::string(100, 'c'), "\x1b]0;owned\x07" + std::string(100000, 'r')});
  w.ctl->OnAgentMessage("n1", HealthBeat({}, flood), w.now + 3);
  auto n = NodeOf(*w.ctl, "n1");
  CHECK(n.health_problems_size() == 16);
  CHECK(n.reason().size() <= 8 + 512);
  CHECK(n.reason().find('\x1b') == std::string::npos);
  for (const auto& p : n.health_problems()) CHECK(p.size() <= 16 + 2 + 256);
}

TEST_CASE("the registration answer carries schedd's clock for the agent's check", "[controller][health]") {
  NodesWorld w(1, 1);
  auto reg = w.ctl->OnRegister(NodeReg("n9", 1), w.now + 3);
  CHECK(reg.time() == w.now + 3);
}

TEST_CASE("[health] is read with its lines, errors name FILE:LINE", "[policy][health]") {
  auto r = mlsched::policy::ParsePolicy("[health]\naction = \"drain-and-requeue\"\nauto_resume = false\nrequeue_grace = \"2m\"\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK(r.policy->health.action == core::HealthPolicy::Action::kDrainAndRequeue);
  CHECK_FALSE(r.policy->health.auto_resume);
  CHECK(r.policy->health.requeue_grace == 120);
  CHECK(r.policy->health.source.Of("action") == "p.toml:2");
  auto d = mlsched::policy::ParsePolicy("", "d.toml");
  CHECK(d.policy->health.action == core::HealthPolicy::Action::kDrain);
  CHECK(d.policy->health.auto_resume);
  for (const auto& [toml, error] : std::vector<std::pair<std::string, std::string>>{
           {"[health]\naction = \"reboot\"\n", "e.toml:2:10: 'action' in [health]: \"reboot\" is not one of \"drain\", \"drain-and-requeue\""},
           {"[health]\naction = 1\n", "e.toml:2:10: 'action' in [health]: expected a string"},
           {"[health]\nrequeue_grace = \"2h\"\n", "e.toml:2:17: 'requeue_grace' in [health]: at most 1h"},
           {"[health]\nauto_resume = \"yes\"\n", "e.toml:2"},
           {"[health]\ninterval = \"1m\"\n", "e.toml:2:1: unknown key 'interval' in [health]"},
       }) {
    auto e = mlsched::policy::ParsePolicy(toml, "e.toml");
    INFO(toml);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.ErrorText(), Catch::Contains(error));
  }
}
