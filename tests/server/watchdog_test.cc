// The gang watchdog ([watchdog]; gang_watchdog.h, controller_watchdog.cc): a gang whose ranks stop
// advancing their step is diagnosed (stack traces from its agents), requeued, and the node whose
// ranks are outside the collective (or behind) suspected and drained.
#include <catch2/catch.hpp>

#include "schedd/server/controller.h"
#include "schedd/server/gang_watchdog.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

v1::AgentMessage StepBeat(int64_t job, int32_t attempt, int32_t rank, int64_t step) {
  v1::AgentMessage m = Heartbeat({{job, attempt, rank}});
  m.mutable_heartbeat()->mutable_running(0)->set_step(step);
  return m;
}

v1::AgentMessage Stacks(int64_t job, int32_t attempt, int32_t rank, bool in_collective, const std::string& summary) {
  v1::AgentMessage m;
  m.mutable_stacks()->set_job_id(job);
  m.mutable_stacks()->set_attempt(attempt);
  auto* r = m.mutable_stacks()->add_ranks();
  r->set_rank(rank);
  r->set_in_collective(in_collective);
  r->set_summary(summary);
  r->set_file("/home/alice/mlsched-stacks-" + std::to_string(job) + ".1." + std::to_string(rank) + ".txt");
  return m;
}

struct WatchWorld : NodesWorld {
  WatchWorld() : NodesWorld(3, 1) {
    ctl->SetPolicy(PolicyFromText("[watchdog]\nstall_after = \"60s\"\ndrain_after = 1\nrequeue_grace = \"20s\"\n", "w.toml"));
  }
  // A 2-rank gang, one rank per node, running; its ranks at steps `s0` and `s1` at time `at`.
  int64_t StartGang() {
    int64_t id = Submit(Spec(2, 1), alice);
    ctl->RunCycle(now);
    PrepareAndStartAll();
    return id;
  }
  void Steps(int64_t id, int64_t s0, int64_t s1, int64_t at) {
    auto info = Job(id);
    std::set<std::string> idle{"n1", "n2", "n3"};
    for (const auto& t : info.tasks()) {
      ctl->OnAgentMessage(t.node(), StepBeat(id, 1, t.rank(), t.rank() == 0 ? s0 : s1), at);
      idle.erase(t.node());
    }
    for (const auto& n : idle) ctl->OnAgentMessage(n, Heartbeat({}), at);  // the idle node lives too
  }
  std::string NodeOfRank(int64_t id, int32_t rank) {
    const v1::JobInfo info = Job(id);
    for (const auto& t : info.tasks())
      if (t.rank() == rank) return t.node();
    return "";
  }
  v1::NodeInfo Node(const std::string& name) {
    for (const auto& n : ctl->Nodes())
      if (n.name() == name) return n;
    return {};
  }
};

}  // namespace

TEST_CASE("GangWatchdog: a stall is no progress for stall_after, reported once, and ranks behind are named", "[watchdog]") {
  GangWatchdog w;
  CHECK(w.TakeStalls(60, 1000).empty());
  w.Observe(7, 1, 0, "a", 0, -1, 100);  // step 0: not watched
  CHECK(w.TakeStalls(60, 1000).empty());
  w.Observe(7, 1, 0, "a", 5, -1, 100);
  w.Observe(7, 1, 1, "b", 8, -1, 110);
  CHECK(w.TakeStalls(60, 169).empty());
  auto stalls = w.TakeStalls(60, 170);
  REQUIRE(stalls.size() == 1);
  CHECK(stalls[0].job == 7);
  CHECK(stalls[0].step == 8);
  CHECK(stalls[0].since == 110);
  CHECK(w.TakeStalls(60, 500).empty());  // once
  auto behind = w.BehindRanks(7);
  REQUIRE(behind.size() == 1);
  CHECK(behind[0].rank == 0);
  CHECK(behind[0].node == "a");
  w.Observe(7, 1, 1, "b", 9, -1, 600);  // progress again: a later stall is a new one
  CHECK(w.TakeStalls(60, 660).size() == 1);
  w.Observe(7, 1, 0, "a", 1, -1, 700);  // an older attempt's late report is ignored after attempt 2 starts
  w.Observe(7, 2, 0, "c", 1, -1, 700);
  w.Observe(7, 1, 0, "a", 99, -1, 701);
  CHECK(w.BehindRanks(7).empty());
  w.Forget(7);
  CHECK(w.TakeStalls(60, 10000).empty());
  CHECK(w.Suspect("a", 1000, 100, 1001) == 1);
  CHECK(w.Suspect("a", 1040, 100, 1001) == 1);  // the same user again: still one
  CHECK(w.Suspect("a", 1050, 100, 1002) == 2);
  CHECK(w.Suspect("a", 1200, 100, 1002) == 1);  // the first three fell out of the window
}

TEST_CASE("a stalled gang: stack traces asked for, the rank outside the collective's node drained, the gang requeued without it",
          "[controller][watchdog]") {
  WatchWorld w;
  int64_t id = w.StartGang();
  w.Steps(id, 1, 1, w.now + 10);
  w.Steps(id, 40, 40, w.now + 100);
  w.Steps(id, 40, 40, w.now + 125);  // heartbeats go on (the ranks live), the steps do not
  w.Steps(id, 40, 40, w.now + 150);
  w.sink.Clear();
  w.ctl->Tick(w.now + 150);  // 50 s without progress: not yet
  CHECK(w.sink.Of(w.NodeOfRank(id, 0), v1::SchedulerMessage::kCollectStacks).empty());
  w.Steps(id, 40, 40, w.now + 160);
  w.ctl->Tick(w.now + 161);
  const std::string n0 = w.NodeOfRank(id, 0), n1 = w.NodeOfRank(id, 1);
  for (const auto& n : {n0, n1}) {
    auto ask = w.sink.Of(n, v1::SchedulerMessage::kCollectStacks);
    REQUIRE(ask.size() == 1);
    CHECK(ask[0].collect_stacks().reason() == "stalled at step 40 for 61 s");
  }
  CHECK(HasEvent(EventsOf(w.dir, id), "STALLED|stalled at step 40 for 61 s; collecting stack traces of every rank"));
  // A node that holds no rank of it cannot answer for it.
  const std::string other = n0 != "n1" && n1 != "n1" ? "n1" : n0 != "n2" && n1 != "n2" ? "n2" : "n3";
  w.ctl->OnAgentMessage(other, Stacks(id, 1, 0, false, "x"), w.now + 162);
  CHECK(w.Node(other).rejected_reports() == 1);
  // Rank 1 waits in the all-reduce; rank 0 is somewhere else.
  w.ctl->OnAgentMessage(n1, Stacks(id, 1, 1, true, "ncclKernel < c10d::allreduce"), w.now + 163);
  CHECK(w.sink.Of(n0, v1::SchedulerMessage::kSignal).empty());  // waits for every node
  w.ctl->OnAgentMessage(n0, Stacks(id, 1, 0, false, "read < load_batch"), w.now + 164);
  for (const auto& n : {n0, n1}) {
    auto sig = w.sink.Of(n, v1::SchedulerMessage::kSignal);
    REQUIRE(sig.size() == 1);
    CHECK(sig[0].signal().reason() == "stall");
    CHECK(sig[0].signal().grace_s() == 20);
  }
  auto n = w.Node(n0);
  CHECK(n.state() == "DRAINING");
  CHECK(n.reason() == "watchdog: rank 0 outside the collective of job " + std::to_string(id) + " in 1 user(s)' suspicions within 86400 s");
  auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "STALL|stalled at step 40 for 61 s; stacks in /home/alice/mlsched-stacks-" + std::to_string(id) +
                             ".1.0.txt, /home/alice/mlsched-stacks-" + std::to_string(id) + ".1.1.txt; suspected " + n0 +
                             ": rank 0 outside the collective; its restart avoids " + n0));
  // The hung rank is killed after the grace (SIGKILL: 137); the other checkpointed (75).
  w.ctl->OnAgentMessage(n1, Exited(id, 1, 1, 75), w.now + 170);
  w.ctl->OnAgentMessage(n0, Exited(id, 1, 0, 137), w.now + 185);
  auto after = w.Job(id);
  CHECK(after.state() == v1::PENDING);
  CHECK(after.reason() == "Stalled");
  w.ctl->RunCycle(w.now + 186);
  auto again = w.Job(id);
  REQUIRE(again.state() == v1::RUNNING);
  for (const auto& t : again.tasks()) CHECK(t.node() != n0);
}

TEST_CASE("without collective evidence the ranks behind are suspected, a diagnosis concludes without a silent agent",
          "[controller][watchdog]") {
  WatchWorld w;
  w.ctl->SetPolicy(PolicyFromText("[watchdog]\nstall_after = \"60s\"\ndrain_after = 2\n", "w.toml"));
  int64_t id = w.StartGang();
  w.Steps(id, 30, 41, w.now + 100);
  w.Steps(id, 30, 41, w.now + 130);
  w.Steps(id, 30, 41, w.now + 160);
  w.ctl->Tick(w.now + 161);
  const std::string n0 = w.NodeOfRank(id, 0), n1 = w.NodeOfRank(id, 1);
  w.ctl->OnAgentMessage(n1, Stacks(id, 1, 1, false, "nanosleep"), w.now + 162);  // n0 never answers
  w.ctl->Tick(w.now + 180);
  CHECK(w.sink.Of(n0, v1::SchedulerMessage::kSignal).empty());
  w.Steps(id, 30, 41, w.now + 185);
  w.ctl->Tick(w.now + 191);  // 30 s after the request: concluded with what came
  REQUIRE(w.sink.Of(n0, v1::SchedulerMessage::kSignal).size() == 1);
  CHECK(HasEvent(EventsOf(w.dir, id), "STALL|stalled at step 41 for 61 s; stacks in /home/alice/mlsched-stacks-" +
                                          std::to_string(id) + ".1.1.txt; suspected " + n0 + ": rank 0 behind (step 30 of 41); its restart avoids " + n0));
  CHECK(w.Node(n0).reason().empty());  // drain_after 2: once is only a suspicion
  CHECK(w.Job(id).reason() == "Stalled");
}

TEST_CASE("one user's stalls only steer that user's job off the node, a second user's stall there drains it",
          "[controller][watchdog][security]") {
  WatchWorld w;
  w.ctl->SetPolicy(PolicyFromText("[watchdog]\nstall_after = \"60s\"\ndrain_after = 2\nrequeue_grace = \"20s\"\n", "w.toml"));
  // A gang whose ranks all stop at step 40; the rank on `outside` (rank 0's node when "") is
  // outside the collective, the others wait in it. Returns that node.
  auto stall = [&](int64_t id, int32_t attempt, int64_t t0, std::string outside) {
    const v1::JobInfo info = w.Job(id);
    if (outside.empty()) outside = w.NodeOfRank(id, 0);
    for (int64_t t : {t0, t0 + 40, t0 + 70}) {
      std::set<std::string> idle{"n1", "n2", "n3"};
      for (const auto& task : info.tasks()) {
        w.ctl->OnAgentMessage(task.node(), StepBeat(id, attempt, task.rank(), 40), t);
        idle.erase(task.node());
      }
      for (const auto& n : idle) w.ctl->OnAgentMessage(n, Heartbeat({}), t);
    }
    w.ctl->Tick(t0 + 71);
    for (const auto& task : info.tasks())
      w.ctl->OnAgentMessage(task.node(), Stacks(id, attempt, task.rank(), task.node() != outside, "x"), t0 + 72);
    for (const auto& task : info.tasks())
      w.ctl->OnAgentMessage(task.node(), Exited(id, attempt, task.rank(), task.node() == outside ? 137 : 75), t0 + 95);
    return outside;
  };
  // Alice's gang stalls with rank 0 outside the collective: its node is suspected, not drained.
  int64_t a = w.StartGang();
  const std::string bad = stall(a, 1, w.now + 10, "");
  CHECK(w.Node(bad).reason().empty());
  CHECK(w.Job(a).state() == v1::PENDING);
  // Her restart avoids the node (as with --exclude): both ranks on the two other nodes.
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 100);
  auto again = w.Job(a);
  REQUIRE(again.state() == v1::RUNNING);
  for (const auto& t : again.tasks()) CHECK(t.node() != bad);
  CHECK_THAT(w.Job(a).stall(), Catch::Contains("its restart avoids " + bad));
  w.PrepareAndStartAll(w.now + 101, w.now + 101);
  for (const auto& t : again.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(a, 2, t.rank(), 0), w.now + 102);
  REQUIRE(w.Job(a).state() == v1::COMPLETED);
  // Her status files alone never drain it. Bob's 3-rank gang stalls the same way on it: two
  // users' suspicions drain it.
  w.sink.Clear();
  int64_t b = w.Submit(Spec(3, 1), User("bob", 1002));
  w.ctl->RunCycle(w.now + 110);
  w.PrepareAndStartAll(w.now + 110, w.now + 110);
  REQUIRE(w.Job(b).state() == v1::RUNNING);
  stall(b, 1, w.now + 120, bad);
  CHECK(w.Node(bad).state() == "DRAIN");
  CHECK_THAT(w.Node(bad).reason(), Catch::Contains("in 2 user(s)' suspicions"));
}

TEST_CASE("[watchdog] is read with its lines, errors name FILE:LINE", "[policy][watchdog]") {
  auto r = mlsched::policy::ParsePolicy("[watchdog]\nstall_after = \"10m\"\ndrain_after = 3\nsuspect_window = \"1d\"\nrequeue_grace = \"2m\"\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK(r.policy->watchdog.stall_after == 600);
  CHECK(r.policy->watchdog.drain_after == 3);
  CHECK(r.policy->watchdog.suspect_window == 86400);
  CHECK(r.policy->watchdog.requeue_grace == 120);
  CHECK(r.policy->watchdog.source.Of("drain_after") == "p.toml:3");
  // On by default, conservatively: 30 min without a step; below half the median rate for 15 min.
  const auto defaults = mlsched::policy::ParsePolicy("", "d.toml").policy->watchdog;
  CHECK(defaults.stall_after == 1800);
  CHECK(defaults.straggler_ratio == 0.5);
  CHECK(defaults.straggler_window == 900);
  CHECK(defaults.drain_after == 2);
  CHECK(mlsched::policy::ParsePolicy("[watchdog]\nstall_after = 0\nstraggler_ratio = 0\n", "off.toml").policy->watchdog.stall_after == 0);
  for (const auto& [toml, error] : std::vector<std::pair<std::string, std::string>>{
           {"[watchdog]\nstall_after = \"5s\"\n", "e.toml:2:15: 'stall_after' in [watchdog]: at least 10s"},
           {"[watchdog]\ndrain_after = 0\n", "e.toml:2"},
           {"[watchdog]\ndrain_after = 500\n", "e.toml:2:15: 'drain_after' in [watchdog]: at most 100"},
           {"[watchdog]\nstraggler_ratio = 1.5\n", "e.toml:2:19: 'straggler_ratio' in [watchdog]: a fraction"},
           {"[watchdog]\nstraggler_window = \"30s\"\n", "e.toml:2:20: 'straggler_window' in [watchdog]: at least 60s"},
           {"[watchdog]\nstragler_ratio = 0.5\n", "e.toml:2:1: unknown key 'stragler_ratio' in [watchdog]"},
       }) {
    auto e = mlsched::policy::ParsePolicy(toml, "e.toml");
    INFO(toml);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.ErrorText(), Catch::Contains(error));
  }
}

TEST_CASE("GangWatchdog: a node computing slower than the others' median is a straggler, once per window", "[watchdog]") {
  // Three nodes, one rank each, all at the same steps (a synchronous gang); n3 computes 2.5 s per
  // step, the others 1.0 and 1.2 s.
  auto three_nodes = [](GangWatchdog& g) {
    for (int64_t t = 0; t <= 600; t += 10) {
      const int64_t step = t / 10;
      g.Observe(5, 1, 0, "n1", step, step * 1000, 1000 + t);
      g.Observe(5, 1, 1, "n2", step, step * 1200, 1000 + t);
      g.Observe(5, 1, 2, "n3", step, step * 2500, 1000 + t);
    }
  };
  GangWatchdog w;
  three_nodes(w);
  CHECK(w.TakeStragglers(0.3, 600, 1600).empty());  // 2.5 s is not beyond 1.1 s / 0.3
  CHECK(w.TakeStragglers(0.5, 600, 1600).size() == 1);
  CHECK(w.TakeStragglers(0.5, 600, 1605).empty());  // once per window
  GangWatchdog v;
  three_nodes(v);
  auto s = v.TakeStragglers(0.5, 600, 1600);
  REQUIRE(s.size() == 1);
  CHECK(s[0].node == "n3");
  CHECK(s[0].seconds_per_step == Approx(2.5));
  CHECK(s[0].others_per_step == Approx(1.1));
  // Too short a history, no compute figures, or a gang on one node: nothing.
  GangWatchdog u;
  for (int64_t t = 0; t <= 100; t += 10) {
    u.Observe(6, 1, 0, "n1", t / 10, t * 100, 1000 + t);
    u.Observe(6, 1, 1, "n2", t / 10, t * 900, 1000 + t);
    u.Observe(7, 1, 0, "n1", t / 10, -1, 1000 + t);
    u.Observe(7, 1, 1, "n2", t / 10, -1, 1000 + t);
  }
  CHECK(u.TakeStragglers(0.5, 600, 1100).empty());
  CHECK(u.TakeStragglers(0.5, 100, 1100).size() == 1);  // job 6 over a 100 s window: n2
}

TEST_CASE("a persistent straggler is drained and its gang restarted without it, never on one user's word alone",
          "[controller][watchdog][security]") {
  NodesWorld w(3, 1);
  w.ctl->SetPolicy(PolicyFromText("[watchdog]\nstraggler_ratio = 0.5\nstraggler_window = \"60s\"\ndrain_after = 2\n", "w.toml"));
  int64_t id = w.Submit(Spec(2, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const v1::JobInfo info = w.Job(id);
  std::string slow;
  auto beat = [&](int64_t t) {
    std::set<std::string> idle{"n1", "n2", "n3"};
    for (const auto& task : info.tasks()) {
      v1::AgentMessage m = StepBeat(id, 1, task.rank(), t);  // one step a second
      m.mutable_heartbeat()->mutable_running(0)->set_compute_ms(t * (task.rank() == 1 ? 900 : 300));
      w.ctl->OnAgentMessage(task.node(), m, w.now + t);
      idle.erase(task.node());
      if (task.rank() == 1) slow = task.node();
    }
    for (const auto& n : idle) w.ctl->OnAgentMessage(n, Heartbeat({}), w.now + t);
  };
  for (int64_t t = 1; t <= 70; ++t) {
    beat(t);
    w.ctl->Tick(w.now + t);
  }
  // Suspected once (first window): an event, no drain yet.
  auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "STRAGGLER|straggler " + slow + ": 0.90 s of compute per step against 0.30 s on the other nodes over 60 s"));
  for (const auto& n : w.ctl->Nodes()) CHECK(n.reason().empty());
  for (int64_t t = 71; t <= 140; ++t) {
    beat(t);
    w.ctl->Tick(w.now + t);
  }
  // Suspected twice, but by one user's job: its status files alone never drain a node.
  for (const auto& n : w.ctl->Nodes()) CHECK(n.reason().empty());
  CHECK(w.sink.Of(slow, v1::SchedulerMessage::kSignal).empty());
  w.ctl->SetPolicy(PolicyFromText("[watchdog]\nstraggler_ratio = 0.5\nstraggler_window = \"60s\"\ndrain_after = 1\n", "w.toml"));
  for (int64_t t = 141; t <= 210; ++t) {
    beat(t);
    w.ctl->Tick(w.now + t);
  }
  bool drained = false;
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == slow)
      drained = n.reason() == "watchdog: straggler (0.90 s of compute per step against 0.30 s on the other nodes over 60 s) of job " +
                                 std::to_string(id) + " in 1 user(s)' suspicions within 86400 s";
  CHECK(drained);
  auto sig = w.sink.Of(slow, v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "straggler");
  CHECK(w.Job(id).reason() == "Straggler");
  CHECK_THAT(w.Job(id).stall(), Catch::StartsWith("restarted without straggler " + slow));
}
