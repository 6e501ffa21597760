// Eviction notices: parsing AWS and GCP metadata answers, and polling a local HTTP server.
#include <catch2/catch.hpp>
#include <mutex>
#include <vector>

#include "agentd/eviction.h"
#include "http_stub.h"
#include "support.h"

using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("UTC timestamps of instance-action", "[eviction]") {
  CHECK(ParseUtcTimestamp("1970-01-01T00:00:00Z") == 0);
  CHECK(ParseUtcTimestamp("2026-11-22T21:00:00Z") == 1795381200);
  CHECK(ParseUtcTimestamp("2026-11-22T21:00:00.123Z") == 1795381200);
  CHECK_FALSE(ParseUtcTimestamp("yesterday"));
  CHECK_FALSE(ParseUtcTimestamp("2026-13-22T21:00:00Z"));
  CHECK_FALSE(ParseUtcTimestamp("2026-11-22T21:00:00+02:00"));
}

TEST_CASE("metadata answers: notice or not", "[eviction]") {
  std::string problem;
  CHECK_FALSE(ParseEvictionResponse(404, "Not Found", 1000, &problem));
  CHECK(problem.empty());
  CHECK_FALSE(ParseEvictionResponse(200, "FALSE\n", 1000, &problem));
  auto gcp = ParseEvictionResponse(200, "TRUE", 1000, &problem);
  REQUIRE(gcp);
  CHECK(gcp->deadline == 1000 + kGcpNoticeSeconds);
  CHECK(gcp->source == "gcp-preempted");
  auto aws = ParseEvictionResponse(200, R"({"action": "terminate", "time": "2026-11-22T21:00:00Z"})", 1000, &problem);
  REQUIRE(aws);
  CHECK(aws->deadline == 1795381200);
  CHECK(aws->source == "aws-instance-action");
  CHECK_FALSE(ParseEvictionResponse(200, "<html>", 1000, &problem));
  CHECK(problem.find("unrecognized") != std::string::npos);
  problem.clear();
  CHECK_FALSE(ParseEvictionResponse(500, "", 1000, &problem));
  CHECK(problem.find("HTTP 500") != std::string::npos);
}

TEST_CASE("the poller reports a notice served over HTTP exactly once", "[eviction]") {
  HttpStub http;
  std::mutex mu;
  std::vector<EvictionNoticeInfo> notices;
  EvictionPoller poller(http.Url("/latest/meta-data/spot/instance-action"), 20ms, [&](const EvictionNoticeInfo& n) {
    std::lock_guard lk(mu);
    notices.push_back(n);
  });
  poller.Start();
  REQUIRE(WaitUntil([&] { return http.Requests() >= 3; }));  // 404s: no notice yet
  {
    std::lock_guard lk(mu);
    CHECK(notices.empty());
  }
  http.Set(200, R"({"action":"stop","time":"2026-11-22T21:00:00Z"})");
  REQUIRE(WaitUntil([&] { std::lock_guard lk(mu); return !notices.empty(); }));
  int after = http.Requests();
  std::this_thread::sleep_for(100ms);
  CHECK(http.Requests() == after);  // polling stopped after the notice
  std::lock_guard lk(mu);
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].deadline == 1795381200);
}
