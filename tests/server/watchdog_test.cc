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
  w.Observe(7, 1, 0, "a", 0, 100);  // step 0: not watched
  CHECK(w.TakeStalls(60, 1000).empty());
  w.Observe(7, 1, 0, "a", 5, 100);
  w.Observe(7, 1, 1, "b", 8, 110);
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
  w.Observe(7, 1, 1, "b", 9, 600);  // progress again: a later stall is a new one
  CHECK(w.TakeStalls(60, 660).size() == 1);
  w.Observe(7, 1, 0, "a", 1, 700);  // an older attempt's late report is ignored after attempt 2 starts
  w.Observe(7, 2, 0, "c", 1, 700);
  w.Observe(7, 1, 0, "a", 99, 701);
  CHECK(w.BehindRanks(7).empty());
  w.Forget(7);
  CHECK(w.TakeStalls(60, 10000).empty());
  CHECK(w.Suspect("a", 1000, 100) == 1);
  CHECK(w.Suspect("a", 1050, 100) == 2);
  CHECK(w.Suspect("a", 1200, 100) == 1);  // the first two fell out of the window
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
  CHECK(n.reason() == "watchdog: rank 0 outside the collective of job " + std::to_string(id) + " in 1 stall(s) within 86400 s");
  auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "STALL|stalled at step 40 for 61 s; stacks in /home/alice/mlsched-stacks-" + std::to_string(id) +
                             ".1.0.txt, /home/alice/mlsched-stacks-" + std::to_string(id) + ".1.1.txt; suspected " + n0 +
                             ": rank 0 outside the collective"));
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

TEST_CASE("without collective evidence the ranks behind are suspected; a diagnosis concludes without a silent agent",
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
                                          std::to_string(id) + ".1.1.txt; suspected " + n0 + ": rank 0 behind (step 30 of 41)"));
  CHECK(w.Node(n0).reason().empty());  // drain_after 2: once is only a suspicion
  CHECK(w.Job(id).reason() == "Stalled");
}

TEST_CASE("[watchdog] is read with its lines; errors name FILE:LINE", "[policy][watchdog]") {
  auto r = mlsched::policy::ParsePolicy("[watchdog]\nstall_after = \"10m\"\ndrain_after = 3\nsuspect_window = \"1d\"\nrequeue_grace = \"2m\"\n", "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  CHECK(r.policy->watchdog.stall_after == 600);
  CHECK(r.policy->watchdog.drain_after == 3);
  CHECK(r.policy->watchdog.suspect_window == 86400);
  CHECK(r.policy->watchdog.requeue_grace == 120);
  CHECK(r.policy->watchdog.source.Of("drain_after") == "p.toml:3");
  CHECK(mlsched::policy::ParsePolicy("", "d.toml").policy->watchdog.stall_after == 0);
  for (const auto& [toml, error] : std::vector<std::pair<std::string, std::string>>{
           {"[watchdog]\nstall_after = \"5s\"\n", "e.toml:2:15: 'stall_after' in [watchdog]: at least 10s"},
           {"[watchdog]\ndrain_after = 0\n", "e.toml:2"},
           {"[watchdog]\ndrain_after = 500\n", "e.toml:2:15: 'drain_after' in [watchdog]: at most 100"},
           {"[watchdog]\nstraggler_ratio = 0.5\n", "e.toml:2:1: unknown key 'straggler_ratio' in [watchdog]"},
       }) {
    auto e = mlsched::policy::ParsePolicy(toml, "e.toml");
    INFO(toml);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.ErrorText(), Catch::Contains(error));
  }
}
