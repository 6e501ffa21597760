// mlq's and mlcancel's filters turned into JobService requests.
#include <signal.h>

#include <catch2/catch.hpp>

#include "cli/requests.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {
constexpr int64_t kNow = 1'800'000'000;
}  // namespace

TEST_CASE("mlq filters become a ListJobs request", "[cli][requests]") {
  JobFilters f;
  f.job_ids = {"12", "15"};
  f.users = {"alice", "bob"};
  f.partitions = {"gpu"};
  f.states = "PD,r";
  f.all = true;
  auto r = BuildListRequest(f, kNow);
  REQUIRE(r);
  const auto& q = *r.value;
  CHECK(std::vector<int64_t>(q.job_ids().begin(), q.job_ids().end()) == std::vector<int64_t>{12, 15});
  CHECK(q.users_size() == 2);
  CHECK(q.partitions(0) == "gpu");
  REQUIRE(q.states_size() == 2);
  CHECK(q.states(0) == v1::PENDING);
  CHECK(q.states(1) == v1::RUNNING);
  CHECK(q.include_all_finished());
  CHECK(q.finished_since() == 0);  // -j bounds the listing: no window unless --since says so
}

TEST_CASE("mlq --all is bounded: the last 7 days by default, --since TIME otherwise", "[cli][requests]") {
  JobFilters f;
  f.all = true;
  auto r = BuildListRequest(f, kNow);
  REQUIRE(r);
  CHECK(r.value->include_all_finished());
  CHECK(r.value->finished_since() == kNow - kDefaultFinishedWindowS);
  CHECK(kDefaultFinishedWindowS == 7 * 86400);
  JobFilters since;
  since.since = "-2d";  // implies --all
  r = BuildListRequest(since, kNow);
  REQUIRE(r);
  CHECK(r.value->include_all_finished());
  CHECK(r.value->finished_since() == kNow - 2 * 86400);
  since.since = "@1700000000";
  since.job_ids = {"5"};
  CHECK(BuildListRequest(since, kNow).value->finished_since() == 1'700'000'000);
  for (const char* everything : {"@0", "-100000d"}) {  // never 0, which would be schedd's default window
    since.since = everything;
    CHECK(BuildListRequest(since, kNow).value->finished_since() == 1);
  }
  since.since = "last tuesday";
  CHECK_THAT(BuildListRequest(since, kNow).error, Catch::StartsWith("--since: bad time 'last tuesday'"));
  CHECK_FALSE(BuildListRequest(JobFilters{}, kNow).value->include_all_finished());
}

TEST_CASE("mlq without filters asks for schedd's default view", "[cli][requests]") {
  auto r = BuildListRequest(JobFilters{}, kNow);
  REQUIRE(r);
  CHECK(r.value->job_ids().empty());
  CHECK(r.value->states().empty());
  CHECK_FALSE(r.value->include_all_finished());
  JobFilters all;
  all.states = "all";
  CHECK(BuildListRequest(all, kNow).value->states().empty());
}

TEST_CASE("mlq filter errors name the option", "[cli][requests]") {
  JobFilters f;
  f.job_ids = {"12", "abc"};
  CHECK(BuildListRequest(f, kNow).error == "--jobs: 'abc' is not a job id");
  JobFilters s;
  s.states = "RUN";
  CHECK_THAT(BuildListRequest(s, kNow).error, Catch::StartsWith("--states: unknown job state 'RUN'"));
}

TEST_CASE("mlcancel by ids cancels them whoever owns them (schedd checks permission)", "[cli][requests]") {
  CancelSelection sel;
  sel.job_ids = {"7", "8"};
  auto r = BuildCancelRequest(sel, "carol");
  REQUIRE(r);
  CHECK(r.value->job_ids_size() == 2);
  CHECK(r.value->user().empty());
  CHECK(r.value->signal() == 0);
}

TEST_CASE("mlcancel filters alone apply to the caller's own jobs", "[cli][requests]") {
  CancelSelection sel;
  sel.states = "PD";
  auto r = BuildCancelRequest(sel, "carol");
  REQUIRE(r);
  CHECK(r.value->user() == "carol");
  CHECK(r.value->states(0) == v1::PENDING);
  sel.user = "dave";
  CHECK(BuildCancelRequest(sel, "carol").value->user() == "dave");
}

TEST_CASE("mlcancel needs something to select", "[cli][requests]") {
  CancelSelection sel;
  sel.signal = "TERM";
  CHECK(BuildCancelRequest(sel, "carol").error == "nothing to cancel: give job ids or a filter (-u, -t, -n, -p)");
}

TEST_CASE("mlcancel signals and bad values", "[cli][requests]") {
  CancelSelection sel;
  sel.job_ids = {"3"};
  sel.signal = "USR1";
  CHECK(BuildCancelRequest(sel, "u").value->signal() == SIGUSR1);
  sel.signal = "BOGUS";
  CHECK_THAT(BuildCancelRequest(sel, "u").error, Catch::StartsWith("--signal: unknown signal 'BOGUS'"));
  sel.signal = "";
  sel.states = "XX";
  CHECK_THAT(BuildCancelRequest(sel, "u").error, Catch::StartsWith("--state: unknown job state 'XX'"));
  CancelSelection ids;
  ids.job_ids = {"0"};
  CHECK(BuildCancelRequest(ids, "u").error == "'0' is not a job id");
}

TEST_CASE("mlcancel -n/-p lists candidates and cancels the unfinished matches by id", "[cli][requests]") {
  CancelSelection sel;
  sel.name = "train";
  sel.partition = "gpu";
  sel.signal = "KILL";
  sel.states = "R";
  REQUIRE(NeedsListing(sel));
  CHECK_FALSE(NeedsListing(CancelSelection{{"1"}, "u", "", "", "", ""}));
  auto cancel = BuildCancelRequest(sel, "carol");
  REQUIRE(cancel);
  auto list = NarrowingListRequest(*cancel.value, sel);
  CHECK(list.users(0) == "carol");
  CHECK(list.partitions(0) == "gpu");
  CHECK(list.states(0) == v1::RUNNING);

  v1::ListJobsResponse listed;
  auto add = [&](int64_t id, const char* name, v1::JobState st) {
    auto* j = listed.add_jobs();
    j->set_job_id(id);
    j->mutable_spec()->set_name(name);
    j->set_state(st);
  };
  add(1, "train", v1::RUNNING);
  add(2, "eval", v1::RUNNING);
  add(3, "train", v1::COMPLETED);
  add(4, "train", v1::PENDING);
  CHECK(SelectListedJobs(listed, sel, &*cancel.value) == 2);
  CHECK(std::vector<int64_t>(cancel.value->job_ids().begin(), cancel.value->job_ids().end()) ==
        std::vector<int64_t>{1, 4});
  CHECK(cancel.value->user().empty());    // the ids say it all now
  CHECK(cancel.value->states().empty());
  CHECK(cancel.value->signal() == SIGKILL);
}

TEST_CASE("mlq -j reports ids schedd does not know, unless other filters may hide them", "[cli][requests]") {
  JobFilters f;
  f.job_ids = {"5", "6", "6"};
  auto req = BuildListRequest(f, kNow);
  REQUIRE(req);
  v1::ListJobsResponse resp;
  resp.add_jobs()->set_job_id(5);
  CHECK(UnknownJobIds(*req.value, resp) == std::vector<int64_t>{6});
  resp.add_jobs()->set_job_id(6);
  CHECK(UnknownJobIds(*req.value, resp).empty());
  f.states = "R";
  CHECK(UnknownJobIds(*BuildListRequest(f, kNow).value, v1::ListJobsResponse()).empty());
  f.states.clear();
  f.since = "-1d";  // a job that ended earlier is filtered out, not unknown
  CHECK(UnknownJobIds(*BuildListRequest(f, kNow).value, v1::ListJobsResponse()).empty());
}

TEST_CASE("array elements are selected as ARRAY_TASK references", "[cli][requests]") {
  JobFilters f;
  f.job_ids = {"12", "12_3"};
  auto r = BuildListRequest(f, kNow);
  REQUIRE(r);
  CHECK(std::vector<int64_t>(r.value->job_ids().begin(), r.value->job_ids().end()) == std::vector<int64_t>{12});
  REQUIRE(r.value->job_refs_size() == 1);
  CHECK(r.value->job_refs(0) == "12_3");
  f.job_ids = {"12_x"};
  CHECK_THAT(BuildListRequest(f, kNow).error, Catch::Contains("'12_x' is not a job id"));
  CancelSelection sel;
  sel.job_ids = {"7_1"};
  auto c = BuildCancelRequest(sel, "alice");
  REQUIRE(c);
  CHECK(c.value->job_refs(0) == "7_1");
  CHECK(c.value->user().empty());  // explicit jobs: not narrowed to the caller
  // An array job id counts as found when its elements are listed.
  v1::ListJobsRequest req;
  req.add_job_ids(7);
  v1::ListJobsResponse resp;
  auto* j = resp.add_jobs();
  j->set_job_id(8);
  j->mutable_spec()->mutable_array_index()->set_array_job_id(7);
  CHECK(UnknownJobIds(req, resp).empty());
}
