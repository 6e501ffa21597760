// mlq's and mlcancel's paged listing (cli/paging.h) against well-behaved, old and hostile servers,
// each simulated by a page function.
#include <catch2/catch.hpp>

#include <string>

#include "cli/paging.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

v1::JobInfo Job(int64_t id, v1::JobState state = v1::PENDING, int64_t end_time = 0) {
  v1::JobInfo j;
  j.set_job_id(id);
  j.set_state(state);
  j.set_end_time(end_time);
  return j;
}

// A server holding jobs 1..total that pages as the proto says: at most page_size (or `limit`)
// jobs after the token's id, with the next token while more remain. Records every request.
struct PagingServer {
  int64_t total = 0;
  int32_t limit = 100;
  std::vector<v1::ListJobsRequest> requests;
  bool operator()(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
    requests.push_back(req);
    const int64_t after = req.page_token().empty() ? 0 : std::stoll(req.page_token());
    const int32_t n = req.page_size() > 0 ? std::min(req.page_size(), limit) : limit;
    int64_t id = after + 1;
    for (; id <= total && id <= after + n; ++id) *resp->add_jobs() = Job(id);
    if (id <= total) resp->set_next_page_token(std::to_string(id - 1));
    return true;
  }
};

std::vector<int64_t> Ids(const ListOutcome& out) {
  std::vector<int64_t> ids;
  for (const auto& j : out.jobs.jobs()) ids.push_back(j.job_id());
  return ids;
}

}  // namespace

TEST_CASE("a paged listing follows the tokens until the last page", "[cli][paging]") {
  PagingServer server;
  server.total = 250;
  ListOutcome out;
  v1::ListJobsRequest req;
  req.add_users("alice");
  REQUIRE(ListJobPages(req, kDefaultMaxListJobs, std::ref(server), &out));
  CHECK(out.jobs.jobs_size() == 250);
  CHECK(out.jobs.next_page_token().empty());
  CHECK(out.pages == 3);
  CHECK_FALSE(out.capped);
  CHECK(out.error.empty());
  REQUIRE(server.requests.size() == 3);
  CHECK(server.requests[0].page_token().empty());
  CHECK(server.requests[1].page_token() == "100");
  CHECK(server.requests[2].page_token() == "200");
  for (const auto& r : server.requests) {
    CHECK(r.page_size() == kListPageSize);
    CHECK(r.users(0) == "alice");  // the filters go with every page
  }
}

TEST_CASE("an old server that ignores paging answers everything at once", "[cli][paging]") {
  ListOutcome out;
  auto old_server = [](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    for (int64_t id = 1; id <= 3000; ++id) *resp->add_jobs() = Job(id);
    return true;
  };
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, old_server, &out));
  CHECK(out.jobs.jobs_size() == 3000);
  CHECK(out.pages == 1);
  CHECK_FALSE(out.capped);
  ListOutcome capped;
  REQUIRE(ListJobPages({}, 1000, old_server, &capped));
  CHECK(capped.jobs.jobs_size() == 1000);
  CHECK(capped.capped);
  CHECK(capped.error.empty());
}

TEST_CASE("max_jobs (mlq --max-jobs) stops the listing: exactly N jobs, capped only when more may follow", "[cli][paging]") {
  PagingServer server;
  server.total = 250;
  ListOutcome out;
  REQUIRE(ListJobPages({}, 150, std::ref(server), &out));
  CHECK(Ids(out).size() == 150);
  CHECK(Ids(out).back() == 150);
  CHECK(out.capped);
  CHECK(server.requests.size() == 2);
  ListOutcome all;
  REQUIRE(ListJobPages({}, 250, std::ref(server), &all));
  CHECK(all.jobs.jobs_size() == 250);
  CHECK_FALSE(all.capped);
}

TEST_CASE("a server that never stops sending tokens is cut off after kMaxListPages", "[cli][paging][security]") {
  int calls = 0;
  auto endless = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    resp->set_next_page_token("t" + std::to_string(++calls));  // a fresh token each time, no jobs
    return true;
  };
  ListOutcome out;
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, endless, &out));
  CHECK(calls == kMaxListPages);
  CHECK(out.pages == kMaxListPages);
  CHECK_THAT(out.error, Catch::Contains("still sending pages after 10000"));
}

TEST_CASE("a repeated token, an oversized token and repeated jobs are refused", "[cli][paging][security]") {
  int calls = 0;
  auto loop = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    ++calls;
    *resp->add_jobs() = Job(calls);
    resp->set_next_page_token("same");
    return true;
  };
  ListOutcome out;
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, loop, &out));
  CHECK(calls == 2);  // the second answer names the token it was asked with
  CHECK(out.jobs.jobs_size() == 2);
  CHECK_THAT(out.error, Catch::Contains("page token it had sent before"));

  int cycle_calls = 0;
  auto cycle = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    resp->set_next_page_token(++cycle_calls % 2 ? "A" : "B");  // A, B, A, ...
    return true;
  };
  ListOutcome cycled;
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, cycle, &cycled));
  CHECK(cycle_calls == 3);
  CHECK_THAT(cycled.error, Catch::Contains("page token it had sent before"));

  auto huge = [](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    resp->set_next_page_token(std::string(kMaxPageTokenBytes + 1, 'x'));
    return true;
  };
  ListOutcome big;
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, huge, &big));
  CHECK(big.pages == 1);
  CHECK_THAT(big.error, Catch::Contains("page token of 4097 bytes"));

  int pages = 0;
  auto repeats = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    for (int64_t id : {1, 2, 2}) *resp->add_jobs() = Job(id);  // the same jobs on every page
    if (++pages < 3) resp->set_next_page_token(std::to_string(pages));
    return true;
  };
  ListOutcome dup;
  REQUIRE(ListJobPages({}, kDefaultMaxListJobs, repeats, &dup));
  CHECK(Ids(dup) == std::vector<int64_t>{1, 2});
}

TEST_CASE("a failed page fails the listing", "[cli][paging]") {
  int calls = 0;
  auto flaky = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {
    if (++calls == 2) return false;
    *resp->add_jobs() = Job(calls);
    resp->set_next_page_token("p" + std::to_string(calls));
    return true;
  };
  ListOutcome out;
  CHECK_FALSE(ListJobPages({}, kDefaultMaxListJobs, flaky, &out));
}

TEST_CASE("with finished_since, jobs that ended earlier are dropped even if schedd sends them", "[cli][paging]") {
  const int64_t since = 1'800'000'000;
  auto old_server = [&](const v1::ListJobsRequest&, v1::ListJobsResponse* resp) {  // ignores finished_since
    *resp->add_jobs() = Job(1, v1::COMPLETED, since - 1);
    *resp->add_jobs() = Job(2, v1::FAILED, since);
    *resp->add_jobs() = Job(3, v1::RUNNING);
    *resp->add_jobs() = Job(4, v1::CANCELLED, 0);  // cancelled before it started: no end time known
    return true;
  };
  v1::ListJobsRequest req;
  req.set_include_all_finished(true);
  req.set_finished_since(since);
  ListOutcome out;
  REQUIRE(ListJobPages(req, kDefaultMaxListJobs, old_server, &out));
  CHECK(Ids(out) == std::vector<int64_t>{2, 3, 4});
  req.set_finished_since(0);
  ListOutcome unbounded;
  REQUIRE(ListJobPages(req, kDefaultMaxListJobs, old_server, &unbounded));
  CHECK(unbounded.jobs.jobs_size() == 4);
}
