// Idempotent submissions (issue 14, point 2): a retry with the same submission key gets the same
// job, whether its first answer was lost before or after the job was stored.
#include <catch2/catch.hpp>

#include <set>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

/// Forwards to a SqliteStore; the next insert commits and then fails as if its answer was lost
/// (etcd: a deadline after the commit).
struct LostAnswerStore final : Store {
  SqliteStore& s;
  bool lose_next_insert = false;
  explicit LostAnswerStore(SqliteStore& inner) : s(inner) {}
  template <typename T>
  std::future<T> Lose(std::future<T> f) {
    if (!lose_next_insert) return f;
    lose_next_insert = false;
    f.get();  // committed
    std::promise<T> p;
    p.set_exception(std::make_exception_ptr(StoreError("deadline exceeded (the answer was lost)")));
    return p.get_future();
  }
  std::future<InsertedJob> InsertJob(JobRow row) override { return Lose(s.InsertJob(std::move(row))); }
  std::future<InsertedJob> InsertJobArray(JobRow row, size_t count,
                                          std::function<std::string(int64_t, size_t)> spec_of) override {
    return Lose(s.InsertJobArray(std::move(row), count, std::move(spec_of)));
  }
  std::future<void> UpdateJob(const JobRow& row, std::string kind, std::string detail) override {
    return s.UpdateJob(row, std::move(kind), std::move(detail));
  }
  std::future<void> AppendEvent(int64_t job, std::string node, std::string kind, std::string detail) override {
    return s.AppendEvent(job, std::move(node), std::move(kind), std::move(detail));
  }
  std::future<void> SaveAttempt(AttemptRow row) override { return s.SaveAttempt(std::move(row)); }
  std::vector<AttemptRow> LoadAttempts(int64_t a, int64_t b) override { return s.LoadAttempts(a, b); }
  std::future<void> SaveStep(StepRow row) override { return s.SaveStep(std::move(row)); }
  std::vector<StepRow> LoadSteps(const std::vector<int64_t>& ids, size_t limit) override { return s.LoadSteps(ids, limit); }
  std::future<void> SaveUsage(std::map<std::string, double> u, int64_t t) override { return s.SaveUsage(std::move(u), t); }
  int64_t LoadUsage(std::map<std::string, double>* u) override { return s.LoadUsage(u); }
  std::future<void> SaveRuntimes(std::string user, std::vector<int64_t> runs) override {
    return s.SaveRuntimes(std::move(user), std::move(runs));
  }
  std::vector<std::pair<std::string, std::vector<int64_t>>> LoadRuntimes() override { return s.LoadRuntimes(); }
  std::future<void> SavePredictorModel(std::string m) override { return s.SavePredictorModel(std::move(m)); }
  std::string LoadPredictorModel() override { return s.LoadPredictorModel(); }
  std::future<void> SaveProvisionLedger(std::string l) override { return s.SaveProvisionLedger(std::move(l)); }
  std::string LoadProvisionLedger() override { return s.LoadProvisionLedger(); }
  std::future<void> SaveNode(NodeRow row) override { return s.SaveNode(std::move(row)); }
  std::vector<JobRow> LoadJobs(int64_t since) override { return s.LoadJobs(since); }
  std::optional<int64_t> LookupSubmission(const std::string& u, uint32_t uid, const std::string& k) override {
    return s.LookupSubmission(u, uid, k);
  }
  std::optional<JobRow> LoadJob(int64_t id) override { return s.LoadJob(id); }
  std::vector<JobRow> LoadFinishedJobs(int64_t a, int64_t b) override { return s.LoadFinishedJobs(a, b); }
  std::vector<JobRow> LoadFinishedJobsPage(int64_t since, int64_t after, size_t limit, const FinishedFilter& f) override {
    return s.LoadFinishedJobsPage(since, after, limit, f);
  }
  std::vector<NodeRow> LoadNodes() override { return s.LoadNodes(); }
  std::optional<std::string> LoadSpec(int64_t id) override { return s.LoadSpec(id); }
};

/// A controller over a LostAnswerStore, one node of 8 CPUs; alice submits.
struct LostAnswerWorld {
  TempDir dir;
  SqliteStore inner{dir.path.string()};
  LostAnswerStore store{inner};
  RecordingSink sink;
  ControllerConfig cfg = [] {
    ControllerConfig c;
    c.user_of_uid = TestUserName;
    return c;
  }();
  Controller ctl;
  const int64_t now = 1'000'000;
  const Caller alice = User("alice", 1001);
  explicit LostAnswerWorld(core::PolicySet policy) : ctl(store, sink, std::move(policy), cfg) {
    ctl.OnRegister(NodeReg("n1", 8), now);
  }
  /// Submits `spec` with `key` with its answer lost (the insert commits, the call throws), then
  /// retries it; returns the job id the retry got.
  int64_t LoseThenRetry(const v1::JobSpec& spec, const std::string& key) {
    int64_t lost = 0, id = 0;
    store.lose_next_insert = true;
    CHECK_THROWS_AS(ctl.Submit(alice, spec, now, &lost, key), StoreError);
    REQUIRE(ctl.Submit(alice, spec, now + 1, &id, key).ok());
    return id;
  }
  /// The jobs prepared on n1 by one cycle.
  std::set<int64_t> Prepared() {
    ctl.RunCycle(now + 2);
    std::set<int64_t> out;
    for (const auto& m : sink.Of("n1", v1::SchedulerMessage::kPrepare)) out.insert(m.prepare().job_id());
    return out;
  }
};

v1::JobSpec ArrayOf3() {
  v1::JobSpec arr = Spec(1);
  arr.set_array("0-2");
  return arr;
}

}  // namespace

TEST_CASE("a submission stored but whose answer was lost is adopted by its retry: scheduled, not doubled", "[server][idempotency]") {
  LostAnswerWorld w(core::PolicySet{});
  const int64_t single = w.LoseThenRetry(Spec(1), "lost-1");
  const int64_t first = w.LoseThenRetry(ArrayOf3(), "lost-2");
  CHECK(ListAll(w.ctl, Root(), v1::ListJobsRequest{}).size() == 4);  // one job and three elements, each once
  CHECK(w.Prepared() == std::set<int64_t>{single, first, first + 1, first + 2});  // all scheduled
}

TEST_CASE("a lost submission's retry that admission refuses (the lost job fills the limit) still adopts it", "[server][idempotency]") {
  LostAnswerWorld w(PolicyFromText("enforce_associations = false\n[limits]\nmax_pending_jobs_per_user = 3\n", "p.toml"));
  // The lost submission's 3 still count: the retry is refused by admission, found by its key.
  const int64_t first = w.LoseThenRetry(ArrayOf3(), "lost-3");
  CHECK(ListAll(w.ctl, Root(), v1::ListJobsRequest{}).size() == 3);
  CHECK(w.Prepared() == std::set<int64_t>{first, first + 1, first + 2});
}

TEST_CASE("a retried submission with the same key returns the same job and admits nothing twice", "[server][idempotency]") {
  NodesWorld w;
  int64_t a = 0, b = 0, c = 0;
  REQUIRE(w.ctl->Submit(w.alice, Spec(1), w.now, &a, "key-1").ok());
  REQUIRE(w.ctl->Submit(w.alice, Spec(1), w.now + 5, &b, "key-1").ok());
  CHECK(a == b);
  REQUIRE(w.ctl->Submit(w.alice, Spec(1), w.now, &c, "key-2").ok());
  CHECK(c != a);
  v1::ListJobsRequest all;
  CHECK(ListAll(*w.ctl, Root(), all).size() == 2);
  v1::JobSpec arr = Spec(1);
  arr.set_array("0-3");
  int64_t first = 0, again = 0;
  REQUIRE(w.ctl->Submit(w.alice, arr, w.now, &first, "array-1").ok());
  REQUIRE(w.ctl->Submit(w.alice, arr, w.now, &again, "array-1").ok());
  CHECK(again == first);
  CHECK(ListAll(*w.ctl, Root(), all).size() == 6);
  int64_t id = 0;
  Status bad = w.ctl->Submit(w.alice, Spec(1), w.now, &id, "no spaces allowed");
  CHECK(bad.code == Status::kInvalidArgument);
  CHECK_THAT(bad.message, Catch::Contains("submission key"));
  // After a restart (a new controller over the same store) the key still names the job.
  w.ctl.reset();
  w.Start(core::PolicySet{});
  w.ctl->Recover(w.now + 10);
  REQUIRE(w.ctl->Submit(w.alice, Spec(1), w.now + 10, &b, "key-1").ok());
  CHECK(b == a);
}
