// Replica lists (common/server_list.h) and the leader-following decisions (cli/failover.h) with an
// injected call: hints inside the list are followed at once, hints outside it are ignored, dead
// members are skipped, signals hop only where nothing was done.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "cli/failover.h"
#include "common/server_list.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

ServerList Parse(const std::string& text) {
  ServerList list;
  std::string err = ParseServerList(text, &list);
  INFO(err);
  REQUIRE(err.empty());
  return list;
}

std::string ParseError(const std::string& text) {
  ServerList list;
  list.addresses = {"untouched:1"};
  std::string err = ParseServerList(text, &list);
  CHECK(list.addresses == std::vector<std::string>{"untouched:1"});
  return err;
}

/// A scripted cluster: what each address answers, and the addresses called in order.
struct Cluster {
  std::vector<std::string> servers;
  std::map<std::string, HopResult> answers;  // missing = dead (never sent)
  std::vector<std::string> calls;
  HopResult operator()(size_t i) {
    calls.push_back(servers[i]);
    auto it = answers.find(servers[i]);
    if (it != answers.end()) return it->second;
    HopResult dead;
    dead.status = {kCodeUnavailable, "failed to connect to all addresses", {}};
    dead.unsent = true;
    return dead;
  }
};

HopResult Ok() { return HopResult{{0, "", {}}, false, "", false}; }
HopResult Follower(const std::string& leader) {
  return HopResult{{kCodeUnavailable, "schedd is a follower; the leader is " + leader, {}}, true, leader, false};
}
HopResult Lost() { return HopResult{{kCodeUnavailable, "Socket closed", {}}, false, "", false}; }

}  // namespace

TEST_CASE("server lists: one address or several TCP replicas", "[cli][ha]") {
  CHECK(Parse("unix:/run/mlsched/schedd.sock").addresses == std::vector<std::string>{"unix:/run/mlsched/schedd.sock"});
  CHECK(Parse("a:7000").addresses == std::vector<std::string>{"a:7000"});
  CHECK(Parse("a:7000, b.example.com:7001 ,[::1]:7002").addresses ==
        std::vector<std::string>{"a:7000", "b.example.com:7001", "[::1]:7002"});
  CHECK(Parse("a:1,b:2").IndexOf("b:2") == 1);
  CHECK(Parse("a:1,b:2").IndexOf("c:3") == -1);
  CHECK(Parse("a:1,b:2").Joined() == "a:1, b:2");
}

TEST_CASE("server lists: mixing unix and TCP is refused", "[cli][ha]") {
  CHECK_THAT(ParseError("a:7000,unix:/run/s.sock"), Catch::Contains("unix:/run/s.sock: a Unix socket reaches one local schedd"));
  CHECK_THAT(ParseError("unix:/a.sock,unix:/b.sock"), Catch::Contains("cannot be part of a list"));
}

TEST_CASE("server lists: limits and malformed entries", "[cli][ha]") {
  std::string sixteen, seventeen;
  for (int i = 1; i <= 17; ++i) {
    std::string a = "h" + std::to_string(i) + ":7000";
    if (i <= 16) sixteen += (sixteen.empty() ? "" : ",") + a;
    seventeen += (seventeen.empty() ? "" : ",") + a;
  }
  CHECK(Parse(sixteen).addresses.size() == kMaxServers);
  CHECK_THAT(ParseError(seventeen), Catch::Contains("more than 16 addresses"));
  CHECK_THAT(ParseError(std::string(kMaxServerAddressBytes, 'h') + ":1"), Catch::Contains("longer than 256 bytes"));
  CHECK_THAT(ParseError(""), Catch::Contains("empty entry"));
  CHECK_THAT(ParseError("a:1,,b:2"), Catch::Contains("empty entry"));
  CHECK_THAT(ParseError("a:1,"), Catch::Contains("empty entry"));
  CHECK_THAT(ParseError("a:1,a:1"), Catch::Contains("a:1 is named twice"));
  CHECK_THAT(ParseError("a"), Catch::Contains("expected HOST:PORT"));
  CHECK_THAT(ParseError("a:0"), Catch::Contains("port must be a number from 1 to 65535"));
  CHECK_THAT(ParseError("a:70000"), Catch::Contains("port must be"));
  CHECK_THAT(ParseError("a:x"), Catch::Contains("port must be"));
  CHECK_THAT(ParseError(":7000"), Catch::Contains("expected HOST:PORT"));
  CHECK_THAT(ParseError("unix:relative.sock"), Catch::Contains("absolute path"));
}

TEST_CASE("failover: a follower's hint sends the call to the leader at once", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1", "c:1"};
  c.answers = {{"a:1", Follower("c:1")}, {"b:1", Follower("c:1")}, {"c:1", Ok()}};
  size_t current = 0;
  auto r = CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(r.status.ok());
  CHECK(c.calls == std::vector<std::string>{"a:1", "c:1"});
  CHECK(current == 2);
  CHECK_FALSE(r.ambiguous);
  // The next call goes straight to the leader.
  c.calls.clear();
  CHECK(CallWithFailover(c.servers, &current, std::ref(c)).status.ok());
  CHECK(c.calls == std::vector<std::string>{"c:1"});
}

TEST_CASE("failover: a hint outside the list is ignored and the next member is tried", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1"};
  c.answers = {{"a:1", Follower("evil:1")}, {"b:1", Ok()}};
  size_t current = 0;
  CHECK(CallWithFailover(c.servers, &current, std::ref(c)).status.ok());
  CHECK(c.calls == std::vector<std::string>{"a:1", "b:1"});
}

TEST_CASE("failover: dead members are skipped and every member is tried once", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1", "c:1"};
  c.answers = {{"c:1", Ok()}};
  size_t current = 0;
  CHECK(CallWithFailover(c.servers, &current, std::ref(c)).status.ok());
  CHECK(c.calls == std::vector<std::string>{"a:1", "b:1", "c:1"});

  // Nobody answers: each member once, the status names them all; the retry starts over at b.
  c.answers.clear();
  c.calls.clear();
  current = 1;
  auto r = CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(r.status.code == kCodeUnavailable);
  CHECK(c.calls == std::vector<std::string>{"b:1", "c:1", "a:1"});
  CHECK(r.tried == c.calls);
  CHECK(current == 1);
}

TEST_CASE("failover: an election in progress (no hint) rotates and a hint to a dead member is not followed", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1", "c:1"};
  c.answers = {{"a:1", Follower("")}, {"c:1", Follower("b:1")}};  // b is dead
  size_t current = 0;
  auto r = CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(r.status.code == kCodeUnavailable);
  CHECK(c.calls == std::vector<std::string>{"a:1", "b:1", "c:1"});
  // Two followers pointing at each other stop after size + 1 calls.
  c.answers = {{"a:1", Follower("b:1")}, {"b:1", Follower("a:1")}, {"c:1", Follower("a:1")}};
  c.calls.clear();
  current = 0;
  CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(c.calls.size() == 4);
}

TEST_CASE("failover: signals hop only where nothing was done", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1", "c:1"};
  c.answers = {{"a:1", Follower("c:1")}, {"c:1", Ok()}};
  size_t current = 0;
  CHECK(CallWithFailover(c.servers, &current, std::ref(c), /*only_safe_hops=*/true).status.ok());
  CHECK(c.calls == std::vector<std::string>{"a:1", "c:1"});
  // A lost answer may have delivered the signal: no further call.
  c.answers = {{"a:1", Lost()}, {"c:1", Ok()}};
  c.calls.clear();
  current = 0;
  auto r = CallWithFailover(c.servers, &current, std::ref(c), true);
  CHECK(r.status.code == kCodeUnavailable);
  CHECK(r.ambiguous);
  CHECK(c.calls == std::vector<std::string>{"a:1"});
  // Without the restriction a lost answer rotates (idempotent calls).
  c.calls.clear();
  current = 0;
  r = CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(r.status.ok());
  CHECK(r.ambiguous);
  CHECK(c.calls == std::vector<std::string>{"a:1", "b:1", "c:1"});
}

TEST_CASE("failover: a timeout ends the try and moves to the next member", "[cli][ha]") {
  Cluster c;
  c.servers = {"a:1", "b:1"};
  c.answers = {{"a:1", HopResult{{kCodeDeadlineExceeded, "Deadline Exceeded", {}}, false, "", false}}};
  size_t current = 0;
  auto r = CallWithFailover(c.servers, &current, std::ref(c));
  CHECK(r.status.code == kCodeDeadlineExceeded);
  CHECK(r.ambiguous);
  CHECK(current == 1);
  CHECK(c.calls.size() == 1);
}
