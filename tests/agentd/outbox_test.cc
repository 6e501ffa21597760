// The outbox: what survives a disconnection (task exits, eviction notices) and what does not.
#include <catch2/catch.hpp>

#include "agentd/outbox.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace std::chrono_literals;

namespace {

v1::AgentMessage Exit(int64_t job) {
  v1::AgentMessage m;
  m.mutable_task_exited()->set_job_id(job);
  return m;
}

v1::AgentMessage Started(int64_t job) {
  v1::AgentMessage m;
  m.mutable_task_started()->set_job_id(job);
  return m;
}

}  // namespace

TEST_CASE("outbox keeps durable messages through a disconnection", "[outbox]") {
  Outbox box;
  box.Push(Started(1));  // offline: dropped
  box.Push(Exit(1));     // offline: kept
  CHECK(box.Size() == 1);
  box.SetOnline(true);
  box.Push(Started(2));
  box.Push(Exit(2));
  CHECK(box.Size() == 3);
  box.SetOnline(false);  // the stream broke: only exits remain, in order
  REQUIRE(box.Size() == 2);
  box.SetOnline(true);
  auto a = box.Pop(Outbox::Clock::now());
  auto b = box.Pop(Outbox::Clock::now());
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->task_exited().job_id() == 1);
  CHECK(b->task_exited().job_id() == 2);
  CHECK_FALSE(box.Pop(Outbox::Clock::now() + 10ms));  // empty: times out

  box.PushFront(Exit(3));  // a failed write goes back to the front
  box.PushFront(Started(4));  // transient messages are not retried
  CHECK(box.Size() == 1);
  box.Interrupt();
  CHECK_FALSE(box.Pop(Outbox::Clock::now() + 1s));  // interrupted: returns at once
  box.SetOnline(true);
  CHECK(box.Pop(Outbox::Clock::now())->task_exited().job_id() == 3);
  CHECK(Outbox::IsDurable(Exit(1)));
  v1::AgentMessage eviction;
  eviction.mutable_eviction()->set_deadline(5);
  CHECK(Outbox::IsDurable(eviction));
  CHECK_FALSE(Outbox::IsDurable(Started(1)));
}
