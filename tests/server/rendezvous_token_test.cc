// The per-attempt rendezvous secret: one per attempt, the same in every node's Prepare, fresh on
// a requeue, and nowhere users or the state directory could show it.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "schedd/server/controller.h"
#include "schedd/server/rendezvous_token.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

/// The token of every Prepare sent so far; fails unless each of `nodes` got exactly one.
std::set<std::string> PreparedTokens(const RecordingSink& sink, const std::vector<std::string>& nodes) {
  std::set<std::string> tokens;
  for (const auto& n : nodes) {
    auto prep = sink.Of(n, v1::SchedulerMessage::kPrepare);
    REQUIRE(prep.size() == 1);
    tokens.insert(prep[0].prepare().rendezvous_token());
  }
  return tokens;
}

/// True when any file under `dir` contains `needle`.
bool AnyFileContains(const std::filesystem::path& dir, const std::string& needle) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("rendezvous tokens are 64 random hex digits", "[rendezvous]") {
  std::string a = NewRendezvousToken(), b = NewRendezvousToken();
  CHECK(a.size() == 64);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);
}

TEST_CASE("every node of an attempt gets the same fresh rendezvous token, which users never see", "[rendezvous]") {
  TempDir dir;
  auto store = std::make_unique<SqliteStore>(dir.path.string());
  RecordingSink sink;
  ControllerConfig cfg;
  Controller ctl(*store, sink, core::PolicySet{}, cfg);
  int64_t now = 1'000'000;
  const std::vector<std::string> nodes{"n1", "n2", "n3"};
  for (const auto& n : nodes) ctl.OnRegister(NodeReg(n, 1), now);
  int64_t id = 0;
  REQUIRE(ctl.Submit(User("alice", 1001), Spec(3, 1), now, &id).ok());
  ctl.RunCycle(now);
  auto tokens = PreparedTokens(sink, nodes);
  REQUIRE(tokens.size() == 1);
  const std::string first = *tokens.begin();
  CHECK(first.size() == 64);

  v1::JobInfo info;
  REQUIRE(ctl.Get(User("alice", 1001), id, &info).ok());  // even the owner never sees it
  CHECK(info.SerializeAsString().find(first) == std::string::npos);
  CHECK_FALSE(AnyFileContains(dir.path, first));  // not persisted: only the Prepare messages carry it

  // A failed prepare requeues the gang; its next attempt has a token of its own.
  v1::AgentMessage bad = PrepareOk(id, 1);
  bad.mutable_prepare_result()->set_ok(false);
  bad.mutable_prepare_result()->set_error("workdir missing");
  ctl.OnAgentMessage("n1", bad, now);
  sink.Clear();
  ctl.RunCycle(now + cfg.requeue_backoff_s + 1);
  auto second = PreparedTokens(sink, nodes);
  REQUIRE(second.size() == 1);
  CHECK(sink.Of("n1", v1::SchedulerMessage::kPrepare)[0].prepare().attempt() == 2);
  CHECK(*second.begin() != first);
  CHECK(second.begin()->size() == 64);
}

namespace {

/// The node whose Prepare holds rank 0.
std::string Rank0Node(const RecordingSink& sink, const std::vector<std::string>& nodes) {
  for (const auto& n : nodes)
    for (const auto& m : sink.Of(n, v1::SchedulerMessage::kPrepare))
      for (const auto& t : m.prepare().tasks())
        if (t.rank() == 0) return n;
  return "";
}

v1::AgentMessage PrepareOkWithPort(int64_t job, int32_t attempt, int32_t port) {
  v1::AgentMessage m = PrepareOk(job, attempt);
  m.mutable_prepare_result()->set_master_port(port);
  return m;
}

}  // namespace

TEST_CASE("the commit carries the port rank 0's agent reserved, to every node, and the placement keeps it",
          "[rendezvous]") {
  TempDir dir;
  auto store = std::make_unique<SqliteStore>(dir.path.string());
  RecordingSink sink;
  ControllerConfig cfg;
  Controller ctl(*store, sink, core::PolicySet{}, cfg);
  int64_t now = 1'000'000;
  const std::vector<std::string> nodes{"n1", "n2", "n3"};
  for (const auto& n : nodes) ctl.OnRegister(NodeReg(n, 1), now);
  int64_t id = 0;
  REQUIRE(ctl.Submit(User("alice", 1001), Spec(3, 1), now, &id).ok());
  ctl.RunCycle(now);
  const std::string rank0 = Rank0Node(sink, nodes);
  REQUIRE(!rank0.empty());
  for (const auto& n : nodes)  // no port is derived from the job id any more: none in the prepare
    CHECK(sink.Of(n, v1::SchedulerMessage::kPrepare)[0].prepare().master_port() == 0);

  SECTION("the port of rank 0's node, not another node's") {
    for (const auto& n : nodes)
      if (n != rank0) ctl.OnAgentMessage(n, PrepareOkWithPort(id, 1, 20000), now);  // ignored
    CHECK(sink.Of(rank0, v1::SchedulerMessage::kCommit).empty());  // waits for rank 0's node
    ctl.OnAgentMessage(rank0, PrepareOkWithPort(id, 1, 45678), now);
    for (const auto& n : nodes) {
      auto commit = sink.Of(n, v1::SchedulerMessage::kCommit);
      REQUIRE(commit.size() == 1);
      CHECK(commit[0].commit().master_port() == 45678);
    }
    auto row = store->LoadJob(id);  // durable: a recovered schedd knows the port
    REQUIRE(row);
    v1::Placement placement;
    REQUIRE(placement.ParseFromString(row->placement));
    CHECK(placement.master_port() == 45678);
  }
  SECTION("a port out of range from rank 0's node fails the prepare: requeued, never committed") {
    for (const auto& n : nodes)
      if (n != rank0) ctl.OnAgentMessage(n, PrepareOk(id, 1), now);
    ctl.OnAgentMessage(rank0, PrepareOkWithPort(id, 1, 70000), now);
    for (const auto& n : nodes) CHECK(sink.Of(n, v1::SchedulerMessage::kCommit).empty());
    v1::JobInfo info;
    REQUIRE(ctl.Get(User("alice", 1001), id, &info).ok());
    CHECK(info.state() == v1::PENDING);
    CHECK(info.reason() == "LaunchFailedRequeue");
  }
}
