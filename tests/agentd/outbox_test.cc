// The outbox: reliable reports are numbered, survive disconnections and agent restarts on disk,
// and go out again until schedd acknowledges them; transient messages live only on the stream.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agentd/outbox.h"
#include "tests/agentd/support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

v1::AgentMessage Exit(int64_t job) {
  v1::AgentMessage m;
  m.mutable_task_exited()->set_job_id(job);
  return m;
}

v1::AgentMessage Heartbeat() {
  v1::AgentMessage m;
  m.mutable_heartbeat()->set_time(1);
  return m;
}

/// Pops everything queued now: (job id of a task exit or -1, seq) pairs.
std::vector<std::pair<int64_t, uint64_t>> Drain(Outbox& box) {
  std::vector<std::pair<int64_t, uint64_t>> out;
  while (auto m = box.Pop(Outbox::Clock::now())) out.emplace_back(m->has_task_exited() ? m->task_exited().job_id() : -1, m->seq());
  return out;
}

using Sent = std::vector<std::pair<int64_t, uint64_t>>;

}  // namespace

TEST_CASE("reliable reports are numbered and sent again after every reconnect until acknowledged", "[outbox]") {
  Outbox box;
  box.Push(Heartbeat());  // offline: dropped
  box.Push(Exit(1));      // offline: kept, numbered 1
  CHECK(box.Size() == 0);
  CHECK(box.Unacked() == 1);
  box.SetOnline(true);
  box.Push(Heartbeat());
  box.Push(Exit(2));
  CHECK(box.Unsent() == 2);
  CHECK(Drain(box) == Sent{{1, 1}, {-1, 0}, {2, 2}});
  CHECK(box.Unsent() == 0);
  box.SetOnline(false);  // the stream broke before any acknowledgement
  box.SetOnline(true);
  CHECK(Drain(box) == Sent{{1, 1}, {2, 2}});  // both again, oldest first
  box.Ack(1);
  box.SetOnline(false);
  box.SetOnline(true);
  CHECK(Drain(box) == Sent{{2, 2}});
  box.Ack(2);
  CHECK(box.Unacked() == 0);
  CHECK(box.WaitSettled(10ms));
  CHECK_FALSE(box.Pop(Outbox::Clock::now() + 10ms));  // empty: times out
  box.Interrupt();
  CHECK_FALSE(box.Pop(Outbox::Clock::now() + 1s));  // interrupted: returns at once

  CHECK(Outbox::IsReliable(Exit(1)));
  v1::AgentMessage eviction, started;
  eviction.mutable_eviction()->set_deadline(5);
  started.mutable_task_started()->set_job_id(1);
  CHECK(Outbox::IsReliable(eviction));
  CHECK(Outbox::IsReliable(started));
  CHECK_FALSE(Outbox::IsReliable(Heartbeat()));
}

TEST_CASE("unacknowledged reports survive an agent restart on disk and nothing planted there is followed", "[outbox][security]") {
  TempDir tmp;
  const std::string dir = tmp.Str() + "/outbox";
  {
    Outbox box(dir);
    CHECK(box.Load() == 0);
    box.Push(Exit(7));
    box.Push(Exit(8));
    box.Push(Exit(9));
    box.Ack(1);  // 7 is durable at schedd; 8 and 9 are not when the agent dies
  }
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // Planted entries: a symlink named like a report (pointing at a file that must survive), a
  // garbage file, a report that is not reliable.
  std::ofstream(tmp.Str() + "/precious") << "keep me";
  fs::create_symlink(tmp.Str() + "/precious", dir + "/50.report");
  std::ofstream(dir + "/51.report") << "not a protobuf \xff\xff";
  {
    v1::AgentMessage hb = Heartbeat();
    hb.set_seq(52);
    std::ofstream(dir + "/52.report") << hb.SerializeAsString();
  }
  Outbox again(dir);
  CHECK(again.Load() == 2);
  CHECK(fs::exists(tmp.Str() + "/precious"));
  CHECK_FALSE(fs::exists(fs::symlink_status(dir + "/50.report")));
  CHECK_FALSE(fs::exists(dir + "/51.report"));
  CHECK_FALSE(fs::exists(dir + "/52.report"));
  again.SetOnline(true);
  CHECK(Drain(again) == Sent{{8, 2}, {9, 3}});
  again.Push(Exit(10));  // numbered after the highest loaded
  CHECK(Drain(again) == Sent{{10, 4}});
  again.Ack(4);
  CHECK(fs::is_empty(dir));
}

TEST_CASE("an outbox directory others can write is refused", "[outbox][security]") {
  TempDir tmp;
  const std::string dir = tmp.Str() + "/outbox";
  REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  Outbox box(dir);
  CHECK_THROWS_WITH(box.Load(), Catch::Contains("writable only by it"));
  fs::remove(dir);
  fs::create_symlink(tmp.Str(), dir);
  CHECK_THROWS_WITH(Outbox(dir).Load(), Catch::Contains("cannot open outbox directory"));
}
