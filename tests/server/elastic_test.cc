// Elastic gangs in the daemon: an elastic job is launched with world_size = the size the core
// chose, relaunched at once with fewer tasks after an eviction, and a bad range is refused.
#include <catch2/catch.hpp>

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
