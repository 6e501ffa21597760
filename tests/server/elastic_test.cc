// Elastic gangs in the daemon: an elastic job is launched with world_size = the size the core
// chose, relaunched at once with fewer tasks after an eviction or a QoS preemption (an event and
// JobInfo.resize say so), and a bad range is refused.
#include <catch2/catch.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <string>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

using World = NodesWorld;

}  // namespace

namespace {

// An elastic gang of min_tasks..ntasks one-CPU tasks that checkpoints (so it may run on spot).
v1::JobSpec ElasticSpec(int32_t min_tasks, int32_t max_tasks) {
  v1::JobSpec s = Spec(max_tasks, 1);
  s.set_min_tasks(min_tasks);
  s.set_checkpoint_interval_s(60);
  return s;
}

// world_size of every Prepare sent for `job`, and the nodes they went to.
std::map<std::string, int32_t> WorldSizes(const RecordingSink& sink, int64_t job) {
  std::map<std::string, int32_t> out;
  for (const auto& [node, msgs] : sink.sent)
    for (const auto& m : msgs)
      if (m.has_prepare() && m.prepare().job_id() == job) out[node] = m.prepare().world_size();
  return out;
}

}  // namespace

TEST_CASE("an elastic gang is launched with world_size = the size chosen", "[controller][elastic]") {
  World w(4, 1);
  const int64_t rigid = w.Submit(Spec(1, 1), w.alice);  // holds one of the 4 nodes
  w.ctl->RunCycle(w.now);
  REQUIRE(w.Job(rigid).state() == v1::RUNNING);
  w.sink.Clear();
  const int64_t id = w.Submit(ElasticSpec(2, 4), w.alice);
  w.ctl->RunCycle(w.now + 1);
  auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.tasks_size() == 3);
  CHECK(info.spec().min_tasks() == 2);
  CHECK(info.spec().ntasks() == 4);
  const auto sizes = WorldSizes(w.sink, id);
  CHECK(sizes.size() == 3);
  for (const auto& [node, size] : sizes) CHECK(size == 3);
}

TEST_CASE("an elastic gang that loses a node to an eviction is relaunched at once with fewer tasks", "[controller][elastic]") {
  World w(4, 1);
  const int64_t id = w.Submit(ElasticSpec(2, 4), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  auto info = w.Job(id);
  REQUIRE(info.tasks_size() == 4);
  const std::string spot = info.tasks(3).node();
  v1::AgentMessage notice;
  notice.mutable_eviction()->set_deadline(w.now + 30);
  notice.mutable_eviction()->set_source("aws-instance-action");
  w.ctl->OnAgentMessage(spot, notice, w.now);
  for (const auto& t : info.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, 1, t.rank(), 75), w.now + 5);
  REQUIRE(w.Job(id).state() == v1::PENDING);
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 6);  // at once: 3 nodes are left, the gang restarts with 3
  auto again = w.Job(id);
  REQUIRE(again.state() == v1::RUNNING);
  CHECK(again.attempt() == 2);
  CHECK(again.tasks_size() == 3);
  for (const auto& t : again.tasks()) CHECK(t.node() != spot);
  const auto sizes = WorldSizes(w.sink, id);
  CHECK(sizes.size() == 3);
  for (const auto& [node, size] : sizes) CHECK(size == 3);
}

TEST_CASE("a bad elastic range is rejected naming the field", "[controller][elastic]") {
  World w(4, 1);
  int64_t id = 0;
  v1::JobSpec s = ElasticSpec(5, 4);
  Status st = w.ctl->Submit(w.alice, s, w.now, &id);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK(st.message == "min_tasks 5 is above the largest size 4");
  s = ElasticSpec(2, 5);
  s.set_task_step(2);
  st = w.ctl->Submit(w.alice, s, w.now, &id);
  CHECK(st.message == "task range 2-5 is not a multiple of task_step 2");
  s = Spec(4, 1);
  s.set_task_step(2);
  CHECK(w.ctl->Submit(w.alice, s, w.now, &id).message == "task_step 2 needs a task range (min_tasks)");
}

namespace {

// Starts an elastic gang of min_tasks..4 tasks on the 4 nodes of `w`; returns its id.
int64_t RunningOnAllFour(World& w, int32_t min_tasks, const std::string& qos = "") {
  v1::JobSpec spec = ElasticSpec(min_tasks, 4);
  if (!qos.empty()) spec.set_qos(qos);
  const int64_t id = w.Submit(spec, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  REQUIRE(w.Job(id).tasks_size() == 4);
  return id;
}

// An elastic 2-4 gang on all four nodes (min_resize_interval 10 s, restart cost 5 s) whose ranks
// all exited 75 at now + 2 after n4's eviction notice; the sink cleared. Returns the job.
int64_t EvictedFromN4(World& w) {
  core::PolicySet policy;
  policy.elastic.min_resize_interval = 10;
  policy.elastic.restart_cost = 5;
  w.ctl->SetPolicy(policy);
  const int64_t id = RunningOnAllFour(w, 2);
  REQUIRE(w.ctl->Evict(Root(), "n4", w.now + 30, "mladmin", w.now).ok());
  for (int32_t rank = 0; rank < 4; ++rank)
    w.ctl->OnAgentMessage("n" + std::to_string(rank + 1), Exited(id, 1, rank, 75), w.now + 2);
  w.sink.Clear();
  return id;
}

}  // namespace

TEST_CASE("a shrink after an eviction is an event and shows in the job", "[controller][elastic]") {
  World w(4, 1);
  const int64_t id = RunningOnAllFour(w, 2);
  w.sink.Clear();
  REQUIRE(w.ctl->Evict(Root(), "n4", w.now + 30, "mladmin", w.now).ok());
  auto sig = w.sink.Of("n1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "eviction");
  for (int32_t rank = 0; rank < 4; ++rank)
    w.ctl->OnAgentMessage("n" + std::to_string(rank + 1), Exited(id, 1, rank, 75), w.now + 5);
  w.ctl->RunCycle(w.now + 5);
  auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.tasks_size() == 3);
  CHECK(info.resize() == "shrunk 4->3 after eviction of n4 (attempt 2)");
  const auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "shrink|shrunk 4->3 after eviction of n4"));
  CHECK(HasEvent(events, "PREEMPTED|spot eviction"));
}

TEST_CASE("an elastic job restarts only once its own exiting tasks are gone from usable nodes", "[controller][elastic]") {
  // MIN 1: started while its old ranks still hold n2 and n3, it would restart on n1 alone.
  World w(4, 1);
  const int64_t id = RunningOnAllFour(w, 1);
  REQUIRE(w.ctl->Evict(Root(), "n4", w.now + 30, "mladmin", w.now).ok());
  w.ctl->OnAgentMessage("n1", Exited(id, 1, 0, 75), w.now + 5);
  REQUIRE(w.Job(id).state() == v1::PREEMPTED);  // requeued, ranks 1-3 still exiting
  w.ctl->RunCycle(w.now + 5);
  CHECK(w.Job(id).state() == v1::PREEMPTED);
  w.ctl->OnAgentMessage("n2", Exited(id, 1, 1, 75), w.now + 6);
  w.ctl->OnAgentMessage("n3", Exited(id, 1, 2, 75), w.now + 6);
  // Rank 3 on the evicted (drained) node n4 is not waited for: n4 cannot take the job anyway.
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 6);
  auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.tasks_size() == 3);
  for (const auto& [node, size] : WorldSizes(w.sink, id)) CHECK(size == 3);
}

TEST_CASE("an elastic gang preempted for one node restarts at once on the others with fewer tasks", "[controller][elastic][preempt]") {
  World w(4, 1);
  w.ctl->SetPolicy(LowHighQosPolicy());
  const int64_t victim = RunningOnAllFour(w, 2, "low");
  w.sink.Clear();
  v1::JobSpec hspec = Spec(1, 1);
  hspec.set_qos("high");
  const int64_t preemptor = w.Submit(hspec, w.alice);
  w.ctl->RunCycle(w.now + 100);
  auto sig = w.sink.Of("n1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "preemption");
  for (int32_t rank = 0; rank < 4; ++rank)
    w.ctl->OnAgentMessage("n" + std::to_string(rank + 1), Exited(victim, 1, rank, 75), w.now + 105);
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 106);
  REQUIRE(w.Job(preemptor).state() == v1::RUNNING);
  auto info = w.Job(victim);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.tasks_size() == 3);
  CHECK(info.preempt_count() == 1);
  CHECK(info.resize() == "shrunk 4->3 after preemption by job " + std::to_string(preemptor) + " (attempt 2)");
  const auto sizes = WorldSizes(w.sink, victim);
  CHECK(sizes.size() == 3);
  for (const auto& [node, size] : sizes) CHECK(size == 3);
  CHECK_FALSE(sizes.count(w.Job(preemptor).tasks(0).node()));
  CHECK(HasEvent(EventsOf(w.dir, victim), "shrink|shrunk 4->3 after preemption by job " + std::to_string(preemptor)));
}

TEST_CASE("a rigid gang keeps its size and records no resize", "[controller][elastic]") {
  World w(4, 1);
  v1::JobSpec spec = Spec(3, 1);
  spec.set_checkpoint_interval_s(60);
  const int64_t id = w.Submit(spec, w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const auto first = w.Job(id);
  REQUIRE(first.tasks_size() == 3);
  REQUIRE(w.ctl->Evict(Root(), first.tasks(0).node(), w.now + 30, "mladmin", w.now).ok());
  for (const auto& t : first.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, 1, t.rank(), 75), w.now + 5);
  w.ctl->RunCycle(w.now + 5);
  auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.tasks_size() == 3);
  CHECK(info.resize().empty());
  for (const auto& e : EventsOf(w.dir, id)) CHECK(e.rfind("shrink|", 0) != 0);
}

TEST_CASE("a shrunk elastic gang grows back at a checkpoint once its node returns and the interval has passed", "[controller][elastic][grow]") {
  World w(4, 1);
  const int64_t id = EvictedFromN4(w);
  w.ctl->RunCycle(w.now + 2);
  REQUIRE(w.Job(id).tasks_size() == 3);
  w.PrepareAndStartAll(w.now + 2);
  REQUIRE(w.ctl->Drain(Root(), "n4", "", /*resume=*/true).ok());  // the spot node is back
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 11);  // attempt 2 started at now + 2: inside the 10 s interval
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).empty());
  w.ctl->RunCycle(w.now + 12);
  auto sig = w.sink.Of("n1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "resize");
  CHECK(sig[0].signal().attempt() == 2);
  CHECK(w.Job(id).reason() == "Resizing");
  w.ctl->RunCycle(w.now + 13);  // asked once only
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).size() == 1);
  const auto second = w.Job(id);
  for (const auto& t : second.tasks()) w.ctl->OnAgentMessage(t.node(), Exited(id, 2, t.rank(), 75), w.now + 15);
  auto pending = w.Job(id);
  CHECK(pending.state() == v1::PENDING);
  CHECK(pending.reason() == "Resize");
  CHECK(pending.preempt_count() == 0);  // a resize is not a preemption
  CHECK(pending.evictions() == 1);
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 15);
  auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.attempt() == 3);
  CHECK(info.tasks_size() == 4);
  CHECK(info.resize() == "grew 3->4 after resize (capacity freed) (attempt 3)");
  for (const auto& [node, size] : WorldSizes(w.sink, id)) CHECK(size == 4);
  const auto events = EventsOf(w.dir, id);
  CHECK(HasEvent(events, "grow|grew 3->4 after resize (capacity freed)"));
  CHECK(std::count_if(events.begin(), events.end(), [](const std::string& e) { return e.rfind("PREEMPTED|", 0) == 0; }) == 1);
  // At MAX now: no further resize however long it runs.
  w.PrepareAndStartAll();
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 100);
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).empty());
}

TEST_CASE("a resize never stops an attempt that is still launching: the interval counts from all ranks started", "[controller][elastic][grow]") {
  // A container job's nodes may pull its image for minutes after the placement: a resize then
  // would restart an attempt that never ran (and SIGTERM ranks before they can checkpoint).
  World w(4, 1);
  const int64_t id = EvictedFromN4(w);
  w.ctl->RunCycle(w.now + 2);  // attempt 2 placed on 3 nodes
  REQUIRE(w.Job(id).tasks_size() == 3);
  REQUIRE(w.ctl->Drain(Root(), "n4", "", /*resume=*/true).ok());
  w.ctl->RunCycle(w.now + 20);  // 18 s after the placement, still preparing (pulling its image)
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).empty());
  w.PrepareAndStartAll(w.now + 25, w.now + 30);  // prepared at +25, every rank started at +30
  w.ctl->RunCycle(w.now + 35);  // 33 s after the placement, 5 s after all ranks started
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kSignal).empty());
  CHECK(w.Job(id).reason() != "Resizing");
  w.ctl->RunCycle(w.now + 40);  // 10 s after all ranks started
  const auto sig = w.sink.Of("n1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "resize");
  CHECK(sig[0].signal().attempt() == 2);
}

TEST_CASE("a job on a fallback tier returns to its preferred accelerator at a checkpoint once it is free", "[controller][elastic][fallback]") {
  World w(0);
  core::PolicySet policy;
  policy.elastic.min_resize_interval = 10;
  policy.elastic.restart_cost = 5;
  w.ctl->SetPolicy(policy);
  w.ctl->OnRegister(NodeReg("a1", 8, 8, "a100"), w.now);
  w.ctl->OnRegister(NodeReg("h0", 8, 4, "h100"), w.now);  // h100s, too few for the job
  v1::JobSpec spec = Spec(1, 1, 8);
  spec.add_gpu_types("h100");
  spec.set_time_limit_s(3600);
  spec.set_checkpoint_interval_s(60);
  auto* f = spec.add_fallback();
  f->set_accelerator("a100");
  f->set_after_s(600);
  const int64_t id = w.Submit(spec, w.alice);
  w.ctl->RunCycle(w.now + 600);
  REQUIRE(w.Job(id).tasks(0).node() == "a1");
  w.PrepareAndStartAll(w.now + 600);
  w.ctl->OnRegister(NodeReg("h1", 8, 8, "h100"), w.now + 605);  // h100 capacity arrives
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 609);  // attempt 1 started at now + 600: inside the 10 s interval
  CHECK(w.sink.Of("a1", v1::SchedulerMessage::kSignal).empty());
  w.ctl->RunCycle(w.now + 610);
  auto sig = w.sink.Of("a1", v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "resize");
  CHECK(w.Job(id).reason() == "Resizing");
  w.ctl->OnAgentMessage("a1", Exited(id, 1, 0, 75), w.now + 612);
  CHECK(w.Job(id).state() == v1::PENDING);
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 612);
  const auto info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  CHECK(info.attempt() == 2);
  CHECK(info.tasks(0).node() == "h1");
  const auto prep = w.sink.Of("h1", v1::SchedulerMessage::kPrepare);
  REQUIRE(prep.size() == 1);
  CHECK(prep[0].prepare().env().at("MLSCHED_ACCELERATOR") == "h100");
  const auto events = EventsOf(w.dir, id);
  CHECK(std::any_of(events.begin(), events.end(), [](const std::string& e) {
    return e.rfind("resize|back to h100 from fallback tier a100 (1->1 tasks): expected gain ", 0) == 0;
  }));
  CHECK(HasEvent(events, "start|attempt 2 on h100"));
  // On its own accelerator now: no further move however long it runs.
  w.PrepareAndStartAll();
  w.sink.Clear();
  w.ctl->RunCycle(w.now + 700);
  CHECK(w.sink.Of("h1", v1::SchedulerMessage::kSignal).empty());
}
