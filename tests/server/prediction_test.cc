// Run-time prediction in schedd ([prediction]): finished jobs feed each user's history, the store
// keeps it across a restart, planning uses the prediction, and only the time limit ends a job.
#include <catch2/catch.hpp>

#include <map>

#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

// The stored run-time histories by key.
std::map<std::string, std::vector<int64_t>> StoredRuntimes(Store& store) {
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& [key, runs] : store.LoadRuntimes()) out[key] = runs;
  return out;
}

core::PolicySet PredictingPolicy(const std::string& predictor = "user-mean",
                                 const std::string& correction = "incremental", const std::string& by = "user") {
  return PolicyFromText("[backfill]\nmode = \"easy\"\n[prediction]\nenabled = true\nhistory = 2\npredictor = \"" +
                            predictor + "\"\ncorrection = \"" + correction + "\"\nhistory_by = \"" + by + "\"\n",
                        "p.toml");
}

struct PredictWorld : ControllerWorld {
  Caller alice = User("alice", 1001);
  std::string predictor;
  std::string correction;
  std::string history_by;

  explicit PredictWorld(std::string name = "user-mean", std::string fix = "incremental", std::string by = "user")
      : predictor(std::move(name)), correction(std::move(fix)), history_by(std::move(by)) {
    Boot();
  }
  /// A controller (new, or after a restart over the same store) with one 2-CPU node.
  void Boot() {
    Start(PredictingPolicy(predictor, correction, history_by));
    ctl->Recover(now);
    ctl->OnRegister(NodeReg("n1", 2), now);
  }
  void Restart() {
    ctl.reset();
    store.reset();  // flushes the writer queue
    store = std::make_unique<SqliteStore>(dir.path.string());
    sink.Clear();
    Boot();
  }
  int64_t Submit(int64_t time_limit) {
    v1::JobSpec s = Spec(1, 2);  // the whole node
    s.set_time_limit_s(time_limit);
    int64_t id = 0;
    REQUIRE(ctl->Submit(alice, s, now, &id).ok());
    return id;
  }
  v1::JobInfo Job(int64_t id) {
    v1::JobInfo info;
    REQUIRE(ctl->Get(Root(), id, &info).ok());
    return info;
  }
  /// Starts job `id` (prepared and started on n1) in a cycle at `now`.
  void RunStart(int64_t id) {
    sink.Clear();
    ctl->RunCycle(now);
    REQUIRE(Job(id).state() == v1::RUNNING);
    ctl->OnAgentMessage("n1", PrepareOk(id, 1), now);
    ctl->OnAgentMessage("n1", Started(id, 1, 0), now);
  }
  /// Starts a job (time limit 1 h) at `now` and submits a second one the node cannot hold beside
  /// it; after a cycle 1 s later returns the second job and the first one's start (`t0`).
  int64_t BlockedBehindRunning(int64_t& t0, int64_t time_limit = 3600) {
    return BlockedBehind(Submit(time_limit), t0);
  }
  /// The same with the job `running` (submitted, not started yet) as the first one.
  int64_t BlockedBehind(int64_t running, int64_t& t0) {
    t0 = now;
    RunStart(running);
    int64_t blocked = Submit(3600);
    now = t0 + 1;
    ctl->RunCycle(now);
    return blocked;
  }
  /// Alice's history becomes two 100 s runs; then a job of hers with a 1000 s limit (predicted
  /// 100 s) starts at `t0` and another waits behind it (BlockedBehind). Returns the waiting one.
  int64_t PredictedToOverrun(int64_t& running, int64_t& t0) {
    RunFor(100);
    RunFor(100);
    running = Submit(1000);
    return BlockedBehind(running, t0);
  }
  /// At time `at`: a heartbeat from n1 that job `running` still runs, the controller's tick, a cycle.
  void StillRunningAt(int64_t running, int64_t at) {
    now = at;
    ctl->OnAgentMessage("n1", Heartbeat({{running, 1, 0}}), now);
    ctl->Tick(now);
    ctl->RunCycle(now);
  }
  /// Runs a job (time limit `time_limit`) for `seconds` until it exits 0.
  void RunFor(int64_t seconds, int64_t time_limit = 3600) {
    int64_t id = Submit(time_limit);
    RunStart(id);
    now += seconds;
    ctl->OnAgentMessage("n1", Exited(id, 1, 0, 0), now);
    REQUIRE(Job(id).state() == v1::COMPLETED);
    now += 10;
  }
};

}  // namespace

TEST_CASE("prediction: finished jobs feed the history and a restart reloads it", "[server][prediction]") {
  PredictWorld w;
  w.RunFor(100);
  w.RunFor(300);
  w.RunFor(500);  // history 2: 300 and 500 are kept
  w.Restart();
  auto stored = StoredRuntimes(*w.store);
  CHECK(stored["alice"] == std::vector<int64_t>{300, 500});
  // After the restart the blocked job plans with the running job's prediction (mean 400 s), not
  // with its time limit of 3600 s.
  int64_t t0 = 0;
  const int64_t blocked = w.BlockedBehindRunning(t0);
  CHECK(w.Job(blocked).reason() == "Resources");
  CHECK(w.Job(blocked).expected_start() == t0 + 400);
}

TEST_CASE("prediction: history by request plans with the runs of the same request and a restart keeps them",
          "[server][prediction]") {
  PredictWorld w("user-mean", "incremental", "request");
  w.RunFor(100, 3600);
  w.RunFor(120, 3600);
  w.RunFor(2000, 7200);  // alice's last two: 120 and 2000 (mean 1060 s)
  w.Restart();
  std::map<std::string, std::vector<int64_t>> stored = StoredRuntimes(*w.store);
  CHECK(stored["alice"] == std::vector<int64_t>{120, 2000});
  int templates = 0;
  for (const auto& [key, runs] : stored) {
    if (key.rfind("alice:", 0) != 0) continue;
    ++templates;
    if (key.ends_with("|3600s")) CHECK(runs == std::vector<int64_t>{100, 120});
    else CHECK(runs == std::vector<int64_t>{2000});
  }
  CHECK(templates == 2);
  // A 1 h job runs as its request did before (110 s), not as alice's last two jobs (1060 s).
  int64_t t0 = 0;
  const int64_t blocked = w.BlockedBehindRunning(t0, 3600);
  CHECK(w.Job(blocked).expected_start() == t0 + 110);
}

TEST_CASE("prediction: a request template dropped from the history is deleted from the store, in order of use across a restart",
          "[server][prediction]") {
  PredictWorld w("user-mean", "incremental", "request");
  const int cap = core::HistoryBook::kMaxTemplatesPerUser;
  for (int i = 0; i < cap; ++i) w.RunFor(10, 1000 + i);  // as many templates as a user keeps
  w.RunFor(10, 1000);  // the first one is used again: 1001 s is now the least recent
  w.Restart();         // the order comes back from the store
  w.RunFor(10, 5000);  // one template too many
  // Each finished job's saves were flushed by the waited attempt row behind them (one writer).
  const std::map<std::string, std::vector<int64_t>> stored = StoredRuntimes(*w.store);
  CHECK(stored.size() == static_cast<size_t>(cap) + 1);  // the user and `cap` templates
  int with_1000 = 0;
  for (const auto& [key, runs] : stored) {
    CHECK_FALSE(key.ends_with("|1001s"));  // dropped, and deleted from the store
    with_1000 += key.ends_with("|1000s");
  }
  CHECK(with_1000 == 1);  // the first key in key order, but used later: kept
}

TEST_CASE("prediction: an overrun is corrected stepwise and only the time limit ends the job", "[server][prediction]") {
  PredictWorld w;
  int64_t running = 0, t0 = 0;
  const int64_t blocked = w.PredictedToOverrun(running, t0);
  CHECK(w.Job(blocked).expected_start() == t0 + 100);  // predicted
  // Past its prediction: still running; the plan moves by the first step (1 min), then 5 min.
  w.now = t0 + 101;
  w.ctl->OnAgentMessage("n1", Heartbeat({{running, 1, 0}}), w.now);
  w.ctl->Tick(w.now);
  CHECK(w.Job(running).state() == v1::RUNNING);
  w.ctl->RunCycle(w.now);
  CHECK(w.Job(blocked).expected_start() == t0 + 160);
  w.StillRunningAt(running, t0 + 161);
  CHECK(w.Job(running).state() == v1::RUNNING);
  CHECK(w.Job(blocked).expected_start() == t0 + 460);
  // Capped at the time limit, where (and only where) the job is ended.
  w.StillRunningAt(running, t0 + 999);
  CHECK(w.Job(running).state() == v1::RUNNING);
  CHECK(w.Job(blocked).expected_start() == t0 + 1000);
  w.now = t0 + 1000;
  w.ctl->OnAgentMessage("n1", Heartbeat({{running, 1, 0}}), w.now);
  w.ctl->Tick(w.now);
  CHECK(w.Job(running).reason() == "TimeLimit");
  CHECK(w.Job(running).state() == v1::COMPLETING);  // killed; its task exits next
  w.ctl->OnAgentMessage("n1", Exited(running, 1, 0, 137), w.now + 1);
  CHECK(w.Job(running).state() == v1::TIMEOUT);
}

TEST_CASE("prediction: with correction = doubling an overrun job is planned to run twice as long as it has", "[server][prediction]") {
  PredictWorld w("user-mean", "doubling");
  int64_t running = 0, t0 = 0;
  const int64_t blocked = w.PredictedToOverrun(running, t0);
  CHECK(w.Job(blocked).expected_start() == t0 + 100);  // predicted
  for (auto [at, planned_end] : {std::pair{101, 200}, {201, 400}, {401, 800}, {801, 1000}}) {
    INFO("at t0 + " << at);
    w.StillRunningAt(running, t0 + at);
    CHECK(w.Job(running).state() == v1::RUNNING);
    CHECK(w.Job(blocked).expected_start() == t0 + planned_end);  // capped at the time limit last
  }
}

TEST_CASE("prediction: off by default - planning uses the time limit and nothing is recorded", "[server][prediction]") {
  ControllerWorld w;
  core::PolicySet policy;
  policy.backfill.mode = core::BackfillMode::kEasy;
  w.Start(policy);
  w.ctl->OnRegister(NodeReg("n1", 2), w.now);
  v1::JobSpec s = Spec(1, 2);
  s.set_time_limit_s(600);
  int64_t id = 0;
  REQUIRE(w.ctl->Submit(User("alice", 1001), s, w.now, &id).ok());
  w.ctl->RunCycle(w.now);
  w.ctl->OnAgentMessage("n1", PrepareOk(id, 1), w.now);
  w.ctl->OnAgentMessage("n1", Started(id, 1, 0), w.now);
  w.ctl->OnAgentMessage("n1", Exited(id, 1, 0, 0), w.now + 50);
  int64_t a = 0, b = 0;
  REQUIRE(w.ctl->Submit(User("alice", 1001), s, w.now + 60, &a).ok());
  REQUIRE(w.ctl->Submit(User("alice", 1001), s, w.now + 60, &b).ok());
  w.ctl->RunCycle(w.now + 60);
  v1::JobInfo info;
  REQUIRE(w.ctl->Get(Root(), b, &info).ok());
  CHECK(info.expected_start() == w.now + 660);  // a's time limit
  w.ctl.reset();
  w.store.reset();
  w.store = std::make_unique<SqliteStore>(w.dir.path.string());
  CHECK(w.store->LoadRuntimes().empty());
}

TEST_CASE("prediction: mlq --explain says what the expected start rests on", "[server][prediction]") {
  PredictWorld w;
  w.RunFor(100);
  w.RunFor(300);
  int64_t running = w.Submit(3600);
  w.RunStart(running);
  int64_t waiting = w.Submit(3600);
  w.ctl->RunCycle(w.now);
  const std::string basis = w.ctl->StartBasis(waiting, w.now);
  CHECK(basis.find("predicted run times ([prediction] user-mean of the last 2)") != std::string::npos);
  CHECK(basis.find("1 running job(s) (1 predicted, 0 by time limit)") != std::string::npos);
  CHECK(w.ctl->StartBasis(running, w.now).empty());  // not pending
  w.ctl->SetPolicy(PolicyFromText("[backfill]\nmode = \"easy\"\n", "p.toml"));
  CHECK(w.ctl->StartBasis(waiting, w.now).find("the time limits of 1 running job(s)") != std::string::npos);
}

TEST_CASE("prediction: the online-linear model learns from finished jobs and a restart keeps it", "[server][prediction]") {
  PredictWorld w("online-linear");
  core::OnlineLinearPredictor reference(2);  // fed what schedd sees: alice, 3600 s limit, 1 task of 2 CPUs
  core::JobFeatures seen{"alice", 3600, 1, {}};
  seen.per_task.cpu_millis = 2000;
  for (int i = 0; i < 40; ++i) {
    const int64_t run = 100 + 70 * (i % 5);
    w.RunFor(run);
    reference.Observe(seen, run);
  }
  REQUIRE(reference.observations() > core::OnlineLinearPredictor::kWarmup);
  w.Restart();
  CHECK(w.store->LoadPredictorModel() == reference.ModelState());
  // After the restart the blocked job plans with the model's prediction for the running job.
  const core::Duration predicted = reference.Predict(seen);
  CHECK(predicted != core::UserMeanPredictor(2, 1.0, reference.history()).Predict("alice", 3600));
  int64_t t0 = 0;
  const int64_t blocked = w.BlockedBehindRunning(t0);
  CHECK(w.Job(blocked).expected_start() == t0 + predicted);
}

TEST_CASE("prediction: a damaged stored model is dropped and the model starts afresh", "[server][prediction]") {
  PredictWorld w("online-linear");
  w.RunFor(100);
  w.RunFor(300);
  w.store->SavePredictorModel("online-linear/2 40 nan").get();  // past the warm-up, were it taken
  w.Restart();  // logged; the user's history is kept, so before the warm-up the user mean plans
  int64_t t0 = 0;
  const int64_t blocked = w.BlockedBehindRunning(t0);
  CHECK(w.Job(blocked).expected_start() == t0 + 200);
  CHECK_THROWS(w.store->SavePredictorModel(std::string(kMaxPredictorModelBytes + 1, 'x')).get());
}
