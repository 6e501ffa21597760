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
