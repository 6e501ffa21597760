#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>

#include "schedd/server/store.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using mlsched::server::testing::TempDir;

TEST_CASE("store assigns increasing ids and persists across reopen", "[store]") {
  TempDir dir;
  int64_t a, b;
  {
    SqliteStore s(dir.path.string());
    CHECK(s.SchemaVersion() >= 1);
    JobRow r;
    r.spec = "spec-a";
    r.user = "alice";
    r.submit_time = 100;
    a = s.InsertJob(r).get().id;
    r.spec = "spec-b";
    b = s.InsertJob(r).get().id;
    CHECK(b > a);
    JobRow upd = *s.LoadJob(a);
    upd.state = "RUNNING";
    upd.attempt = 1;
    upd.placement = "p";
    upd.preempt_count = 2;
    upd.evictions = 1;
    s.UpdateJob(upd, "start", "attempt 1").get();
  }
  SqliteStore s(dir.path.string());
  auto jobs = s.LoadJobs(0);
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].id == a);
  CHECK(jobs[0].state == "RUNNING");
  CHECK(jobs[0].attempt == 1);
  CHECK(jobs[0].preempt_count == 2);
  CHECK(jobs[0].evictions == 1);
  CHECK(jobs[1].evictions == 0);
  CHECK(jobs[0].spec == "spec-a");  // an update without a spec keeps the stored one
  CHECK(jobs[1].spec == "spec-b");
  CHECK(*s.LoadSpec(b) == "spec-b");
}

TEST_CASE("store groups concurrent inserts and loses none", "[store]") {
  TempDir dir;
  SqliteStore s(dir.path.string());
  std::vector<std::future<InsertedJob>> f;
  for (int i = 0; i < 500; ++i) {
    JobRow r;
    r.spec = "x";
    r.user = "u";
    f.push_back(s.InsertJob(r));
  }
  std::set<int64_t> ids;
  for (auto& x : f) ids.insert(x.get().id);
  CHECK(ids.size() == 500);
  CHECK(s.LoadJobs(0).size() == 500);
}

TEST_CASE("store keeps finished jobs out of the live load unless recent", "[store]") {
  TempDir dir;
  SqliteStore s(dir.path.string());
  JobRow r;
  r.spec = "x";
  r.user = "u";
  int64_t id = s.InsertJob(r).get().id;
  JobRow done = *s.LoadJob(id);
  done.state = "COMPLETED";
  done.end_time = 1000;
  s.UpdateJob(done).get();
  CHECK(s.LoadJobs(1001).empty());
  CHECK(s.LoadJobs(999).size() == 1);
  CHECK(s.LoadFinishedJobs(0, 2000).size() == 1);
  s.SaveNode(NodeRow{"n1", "info", true, "maintenance"}).get();
  auto nodes = s.LoadNodes();
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].drained);
  CHECK(nodes[0].reason == "maintenance");
}

TEST_CASE("store pages finished jobs by user and state through its index (mlacct -u), in id order", "[store][accounting]") {
  TempDir dir;
  SqliteStore s(dir.path.string());
  // 30 jobs of alice, bob and carol in turn; every third ended FAILED, the others COMPLETED; one running.
  for (int i = 0; i < 30; ++i) {
    JobRow r;
    r.spec = "x";
    r.user = i % 3 == 0 ? "alice" : i % 3 == 1 ? "bob" : "carol";
    JobRow done = *s.LoadJob(s.InsertJob(r).get().id);
    done.state = i % 2 == 0 ? "FAILED" : "COMPLETED";
    done.end_time = 1000 + i;
    s.UpdateJob(done).get();
  }
  JobRow live;
  live.user = "alice";
  s.InsertJob(live).get();
  auto users = [](const std::vector<JobRow>& rows) {
    std::set<std::string> out;
    for (const auto& r : rows) out.insert(r.user);
    return out;
  };
  auto alice = s.LoadFinishedJobsPage(0, 0, 100, {{"alice"}, {}});
  CHECK(alice.size() == 10);
  CHECK(users(alice) == std::set<std::string>{"alice"});
  CHECK(std::is_sorted(alice.begin(), alice.end(), [](const JobRow& a, const JobRow& b) { return a.id < b.id; }));
  // Paged: ids above the last one seen, the window's start honoured.
  auto page = s.LoadFinishedJobsPage(0, alice[3].id, 2, {{"alice"}, {}});
  REQUIRE(page.size() == 2);
  CHECK(page[0].id == alice[4].id);
  CHECK(s.LoadFinishedJobsPage(1015, 0, 100, {{"alice"}, {}}).size() == 5);
  auto failed = s.LoadFinishedJobsPage(0, 0, 100, {{"alice", "bob"}, {"FAILED"}});
  CHECK(failed.size() == 10);  // alice's 0, 6, ... and bob's 4, 10, ... (i even)
  for (const auto& r : failed) CHECK(r.state == "FAILED");
  CHECK(s.LoadFinishedJobsPage(0, 0, 100, {}).size() == 30);
  CHECK(s.LoadFinishedJobsPage(0, 0, 100, {{"dave"}, {}}).empty());
  // A list longer than the store applies is not applied (the caller filters).
  Store::FinishedFilter many;
  for (size_t i = 0; i <= Store::FinishedFilter::kMaxFilterNames; ++i) many.users.push_back("u" + std::to_string(i));
  CHECK(s.LoadFinishedJobsPage(0, 0, 100, many).size() == 30);
}

TEST_CASE("accounting retention deletes finished jobs ended before the cutoff with their attempts, events and steps",
          "[store][accounting]") {
  TempDir dir;
  SqliteStore s(dir.path.string());
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    JobRow r;
    r.spec = "x";
    r.user = "alice";
    const int64_t id = s.InsertJob(r).get().id;
    ids.push_back(id);
    JobRow done = *s.LoadJob(id);
    done.state = i == 4 ? "RUNNING" : "COMPLETED";  // the last one still runs
    done.end_time = i == 4 ? 0 : 1000 * (i + 1);   // ended at 1000, 2000, 3000, 4000
    AttemptRow a;
    a.job_id = id;
    a.attempt = 1;
    a.start_time = done.end_time - 100;
    a.end_time = done.end_time;
    s.UpdateJob(done, "end", "done").get();
    s.SaveAttempt(a).get();
    StepRow step;
    step.job_id = id;
    step.name = "hostname";
    s.SaveStep(step).get();
  }
  CHECK(s.LoadAttempts(0, 10000).size() == 5);
  // Cutoff 2500: the jobs ended at 1000 and 2000 go, oldest first, at most 1 per call.
  CHECK(s.PurgeFinished(2500, 1).get() == 1);
  CHECK_FALSE(s.LoadJob(ids[0]));
  CHECK(s.LoadJob(ids[1]));
  CHECK(s.PurgeFinished(2500, 100).get() == 1);
  CHECK(s.PurgeFinished(2500, 100).get() == 0);
  CHECK_FALSE(s.LoadJob(ids[1]));
  for (size_t i = 2; i < 5; ++i) CHECK(s.LoadJob(ids[i]));
  auto attempts = s.LoadAttempts(0, 10000);
  CHECK(attempts.size() == 3);
  for (const auto& a : attempts) CHECK(a.job_id >= ids[2]);
  CHECK(mlsched::server::testing::EventsOf(dir, ids[0]).empty());
  CHECK_FALSE(mlsched::server::testing::EventsOf(dir, ids[2]).empty());
  CHECK(s.LoadSteps({ids[0], ids[1], ids[2]}, 10).size() == 1);
  // A running job is never purged, however old its start.
  CHECK(s.PurgeFinished(1'000'000, 100).get() == 2);
  CHECK(s.LoadJob(ids[4]));
}

TEST_CASE("store array inserts get consecutive ids even beside other inserts", "[store]") {
  TempDir dir;
  SqliteStore s(dir.path.string());
  JobRow r;
  r.user = "alice";
  const int64_t before = s.InsertJob(r).get().id;
  auto array = s.InsertJobArray(r, 5, [](int64_t first, size_t i) { return std::to_string(first) + "_" + std::to_string(i); });
  const int64_t after = s.InsertJob(r).get().id;
  const int64_t first = array.get().id;
  CHECK(first == before + 1);
  CHECK(after == first + 5);
  for (size_t i = 0; i < 5; ++i)
    CHECK(*s.LoadSpec(first + static_cast<int64_t>(i)) == std::to_string(first) + "_" + std::to_string(i));
}

TEST_CASE("the state directory is private: 0700, state.db and its WAL files 0600", "[store][security]") {
  namespace fs = std::filesystem;
  TempDir tmp;  // state.db holds jobs' environments and scripts: no one else may read it
  auto mode = [](const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
  };
  const fs::path dir = tmp.path / "state";
  {
    SqliteStore store(dir.string());
    JobRow row;
    row.spec = "secret";
    store.InsertJob(row).get();
    CHECK(mode(dir) == 0700);
    CHECK(mode(dir / "state.db") == 0600);
    CHECK(mode(dir / "state.db-wal") == 0600);
    CHECK(mode(dir / "state.db-shm") == 0600);
  }
  // A state directory from before this change is tightened on the next start.
  fs::permissions(dir, fs::perms(0755));
  fs::permissions(dir / "state.db", fs::perms(0644));
  {
    SqliteStore store(dir.string());
    CHECK(mode(dir) == 0700);
    CHECK(mode(dir / "state.db") == 0600);
  }
  // A directory holding other files is left alone (a mistaken --state-dir $HOME); the db is private.
  const fs::path shared = tmp.path / "shared";
  fs::create_directories(shared);
  std::ofstream(shared / "notes.txt") << "x";
  fs::permissions(shared, fs::perms(0755));
  {
    SqliteStore store(shared.string());
    CHECK(mode(shared) == 0755);
    CHECK(mode(shared / "state.db") == 0600);
  }
}

TEST_CASE("a submission key stores one job per user however often it is retried, across restarts", "[store][idempotency]") {
  TempDir dir;
  JobRow r;
  r.spec = "x";
  r.user = "alice";
  r.uid = 1001;
  r.submit_time = 1000;
  r.submission_key = "3f2a9c";
  int64_t id = 0;
  {
    SqliteStore s(dir.path.string());
    InsertedJob first = s.InsertJob(r).get();
    CHECK_FALSE(first.existed);
    id = first.id;
    std::vector<std::future<InsertedJob>> retries;  // the same request, again and again, in one group commit
    for (int i = 0; i < 5; ++i) retries.push_back(s.InsertJob(r));
    for (auto& f : retries) {
      InsertedJob again = f.get();
      CHECK(again.existed);
      CHECK(again.id == id);
    }
    JobRow bob = r;
    bob.user = "bob";
    bob.uid = 1002;
    CHECK(s.InsertJob(bob).get().id != id);  // keys are per user
    JobRow array = r;
    array.submission_key = "array-key";
    auto a = s.InsertJobArray(array, 3, [](int64_t, size_t) { return std::string("e"); }).get();
    CHECK(s.InsertJobArray(array, 3, [](int64_t, size_t) { return std::string("e"); }).get().id == a.id);
    CHECK(s.LoadJobs(0).size() == 5);  // alice's job, bob's, 3 array elements
  }
  SqliteStore s(dir.path.string());
  CHECK(s.LookupSubmission("alice", 1001, "3f2a9c") == id);
  CHECK_FALSE(s.LookupSubmission("alice", 1001, "other"));
  CHECK_FALSE(s.LookupSubmission("mallory", 1001, "3f2a9c"));
  CHECK(s.InsertJob(r).get().id == id);
  // Keys are forgotten after kSubmissionKeyTtl (pruned by a later insert).
  JobRow later = r;
  later.submission_key = "later";
  later.submit_time = r.submit_time + kSubmissionKeyTtl + 1;
  s.InsertJob(later).get();
  CHECK_FALSE(s.LookupSubmission("alice", 1001, "3f2a9c"));
}
