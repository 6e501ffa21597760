// Run-time predictor (predictor.h): Tsafrir's mean of the user's last k run times, cold start,
// the cap at the time limit and the stepwise correction on overrun.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "schedd/core/predictor.h"

using namespace mlsched::core;

TEST_CASE("user-mean predictor averages the user's last k run times", "[predictor]") {
  UserMeanPredictor p;  // k = 2 (the paper's)
  p.Observe("alice", 100);
  p.Observe("alice", 300);
  p.Observe("alice", 500);
  CHECK(p.Predict("alice", 10000) == 400);  // mean of 300 and 500: the oldest run is dropped
  CHECK(p.history().runs.at("alice") == std::deque<Duration>{300, 500});
  UserMeanPredictor k3(3);
  for (Duration d : {100, 200, 301}) k3.Observe("bob", d);
  CHECK(k3.Predict("bob", 10000) == 201);  // ceil(601 / 3)
  k3.Observe("bob", 9000);
  CHECK(k3.Predict("bob", 10000) == 3167);  // ceil((200 + 301 + 9000) / 3)
}

TEST_CASE("user-mean predictor keeps users apart", "[predictor]") {
  UserMeanPredictor p;
  p.Observe("alice", 100);
  p.Observe("bob", 900);
  CHECK(p.Predict("alice", 3600) == 100);
  CHECK(p.Predict("bob", 3600) == 900);
}

TEST_CASE("cold start falls back to the time limit", "[predictor]") {
  UserMeanPredictor p;
  CHECK(p.Predict("nobody", 7200) == 7200);
  p.Observe("alice", 60);
  CHECK(p.Predict("nobody", 7200) == 7200);
  CHECK(p.Predict("nobody", 0) == 1);  // never below 1 s
}

TEST_CASE("a prediction is never above the time limit", "[predictor]") {
  UserMeanPredictor p;
  p.Observe("alice", 20000);
  p.Observe("alice", 30000);
  CHECK(p.Predict("alice", 3600) == 3600);
  UserMeanPredictor scaled(3, 1.5);
  for (Duration d : {100, 200, 300}) scaled.Observe("alice", d);
  CHECK(scaled.Predict("alice", 10000) == 300);  // 1.5 x 200
  CHECK(scaled.Predict("alice", 250) == 250);    // capped
  UserMeanPredictor zero;
  zero.Observe("alice", 0);
  CHECK(zero.Predict("alice", 100) == 1);  // never below 1 s either
}

TEST_CASE("an overrun prediction is raised stepwise toward the time limit", "[predictor]") {
  UserMeanPredictor p;
  // The k-th correction adds the k-th step: 1 min, 5 min, 15 min, 30 min, 1 h, 2 h, 5 h, ...
  CHECK(p.Extend(400, 0, 100000) == 460);
  CHECK(p.Extend(460, 1, 100000) == 760);
  CHECK(p.Extend(760, 2, 100000) == 1660);
  CHECK(p.Extend(1660, 3, 100000) == 3460);
  CHECK(p.Extend(0, 10, 10 * 24 * 3600) == 100 * 3600);
  CHECK(p.Extend(0, 99, 10 * 24 * 3600) == 100 * 3600);  // the last step repeats
  CHECK(p.Extend(9990, 5, 10000) == 10000);                // never beyond the time limit
  CHECK(ExtendPrediction(10000, 0, 10000) == 10000);
}

TEST_CASE("a doubling correction sets an overrun prediction to twice the elapsed time", "[predictor]") {
  UserMeanPredictor p;
  p.set_correction(PredictionCorrection::kDoubling);
  CHECK(p.Extend(400, 0, 100000) == 800);
  CHECK(p.Extend(800, 1, 100000) == 1600);  // the same rule at every correction
  CHECK(p.Extend(10, 0, 100000) == 70);     // at least a minute more
  CHECK(p.Extend(0, 0, 100000) == 60);
  CHECK(p.Extend(6000, 2, 10000) == 10000);  // never beyond the time limit
  CHECK(ExtendPrediction(INT64_MAX / 2 + 7, 0, INT64_MAX, PredictionCorrection::kDoubling) == INT64_MAX);  // no overflow
  // Past the elapsed time, from the first prediction: 100 -> 200 -> 400 -> 800.
  CHECK(CorrectedPrediction(100, 50, 100000, PredictionCorrection::kDoubling) == 100);
  CHECK(CorrectedPrediction(100, 100, 100000, PredictionCorrection::kDoubling) == 200);
  CHECK(CorrectedPrediction(100, 401, 100000, PredictionCorrection::kDoubling) == 800);
  CHECK(CorrectedPrediction(100, 999, 1000, PredictionCorrection::kDoubling) == 1000);
  // The policy's names, both ways; anything else is refused.
  CHECK(ParsePredictionCorrection("doubling") == PredictionCorrection::kDoubling);
  CHECK(ParsePredictionCorrection("incremental") == PredictionCorrection::kIncremental);
  CHECK_FALSE(ParsePredictionCorrection("Doubling"));
  CHECK(std::string(PredictionCorrectionName(PredictionCorrection::kDoubling)) == "doubling");
  CHECK(UserMeanPredictor().correction() == PredictionCorrection::kIncremental);  // the default
}

TEST_CASE("history passed in is kept and trimmed to k", "[predictor]") {
  RuntimeHistory h;
  h.runs["alice"] = {10, 20, 30, 40};
  UserMeanPredictor p(2, 1.0, h);
  CHECK(p.history().runs.at("alice") == std::deque<Duration>{30, 40});
  CHECK(p.Predict("alice", 1000) == 35);
  UserMeanPredictor copy(2, 1.0, p.history());
  CHECK(copy.history() == p.history());
  CHECK(copy.Predict("alice", 1000) == 35);
}

TEST_CASE("a running job's prediction is corrected for the time it has run", "[predictor]") {
  CHECK(CorrectedPrediction(100, 50, 1000) == 100);    // not reached yet
  CHECK(CorrectedPrediction(100, 100, 1000) == 160);   // reached: + 1 min
  CHECK(CorrectedPrediction(100, 161, 1000) == 460);   // then + 5 min
  CHECK(CorrectedPrediction(100, 999, 1000) == 1000);  // capped at the time limit
  CHECK(CorrectedPrediction(100, 5000, 1000) == 1000);
}

TEST_CASE("the core plans with the predicted run time but never beyond the time limit", "[predictor]") {
  Job job;
  job.spec.time_limit = 3600;
  CHECK(PlannedRuntime(job) == 3600);
  job.predicted_runtime = 600;
  CHECK(PlannedRuntime(job) == 600);
  job.predicted_runtime = 7200;
  CHECK(PlannedRuntime(job) == 3600);
}

namespace {
JobFeatures Req(const std::string& user, Duration limit, int32_t ntasks = 1) { return JobFeatures{user, limit, ntasks, {}}; }
}  // namespace

TEST_CASE("online-linear predictor learns how run times follow the request", "[predictor]") {
  // Every job runs a quarter of its time limit, whatever its user ran before: the user mean is
  // wrong whenever the limit changes, a model over ln(time limit) is not.
  OnlineLinearPredictor ol;
  UserMeanPredictor um;
  const Duration limits[] = {600, 3600, 7200, 20000, 1800, 43200};
  for (int i = 0; i < 300; ++i) {
    const std::string user = "u" + std::to_string(i % 7);
    const Duration limit = limits[(i / 7 + i) % 6];  // each user sees every limit
    ol.Observe(Req(user, limit), limit / 4);
    um.Observe(Req(user, limit), limit / 4);
  }
  REQUIRE(ol.observations() > OnlineLinearPredictor::kWarmup);
  for (Duration limit : {1200, 10000, 36000}) {
    const Duration p = ol.Predict(Req("u3", limit));
    CHECK(p > limit / 4 * 0.9);
    CHECK(p < limit / 4 * 1.1);
  }
  CHECK(std::abs(um.Predict(Req("u3", 36000)) - 9000) > 900);  // the baseline misses by > 10 %
}

TEST_CASE("online-linear predictor learns from the processors a job asks for, however they are asked", "[predictor]") {
  // A trace's job is one task of N processors: N reaches the model as CPU cores per task. Here
  // run time = 60 s x processors with one time limit for all: only the size explains it.
  OnlineLinearPredictor ol;
  const int64_t sizes[] = {1, 4, 16, 64, 2, 32};
  for (int i = 0; i < 300; ++i) {
    const int64_t n = sizes[(i / 7 + i) % 6];
    JobFeatures f = Req("u" + std::to_string(i % 7), 86400);
    f.per_task.cpu_millis = n * 1000;
    ol.Observe(f, 60 * n);
  }
  for (int64_t n : {8, 48}) {
    JobFeatures f = Req("u3", 86400);
    f.per_task.cpu_millis = n * 1000;
    const Duration p = ol.Predict(f);
    INFO(n << " processors: " << p << " s");
    CHECK(p > 60 * n * 0.8);
    CHECK(p < 60 * n * 1.25);
  }
  JobFeatures gpus = Req("u", 3600, 4);
  gpus.per_task.cpu_millis = 8000;
  CHECK(RequestedProcessors(gpus) == 32);  // 4 tasks x 8 cores
  gpus.per_task.gpus[""] = 2;
  CHECK(RequestedProcessors(gpus) == 8);  // 4 tasks x 2 GPUs
  CHECK(RequestedProcessors(Req("u", 3600, 3)) == 3);  // no per-task request: 1 each
}

TEST_CASE("online-linear predictor: cold start - warm-up - bounds", "[predictor]") {
  OnlineLinearPredictor p;
  CHECK(p.Predict(Req("nobody", 7200)) == 7200);  // no history: the time limit
  CHECK(p.Predict(Req("nobody", 0)) == 1);
  p.Observe(Req("alice", 7200), 100);
  p.Observe(Req("alice", 7200), 300);
  CHECK(p.observations() == 1);                 // the first job has no features yet
  CHECK(p.Predict(Req("alice", 7200)) == 200);  // before kWarmup: the user mean (history 2)
  CHECK(p.Predict(Req("alice", 150)) == 150);   // never above the time limit
  CHECK(p.history().runs.at("alice").size() == 2);
  for (int i = 0; i < 50; ++i) p.Observe(Req("alice", 7200), 100 + i);
  CHECK(p.history().runs.at("alice").size() == 3);  // at least 3 kept for the features
  const Duration d = p.Predict(Req("alice", 7200));
  CHECK(d >= 100);
  CHECK(d <= 200);
  CHECK(p.Predict(Req("alice", 50)) <= 50);
}

TEST_CASE("online-linear predictor state round-trips and bad state is refused", "[predictor]") {
  OnlineLinearPredictor a;
  for (int i = 0; i < 80; ++i) a.Observe(Req("u" + std::to_string(i % 3), 3600 * (1 + i % 4), 1 + i % 8), 60 * (1 + i % 11));
  const std::string state = a.ModelState();
  OnlineLinearPredictor b(2, 1.0, a.history());
  REQUIRE(b.RestoreModel(state));
  CHECK(b.ModelState() == state);
  for (int32_t n : {1, 4, 64}) CHECK(b.Predict(Req("u1", 7200, n)) == a.Predict(Req("u1", 7200, n)));
  OnlineLinearPredictor c;
  const std::string fresh = c.ModelState();
  const std::string bad[] = {"", "user-mean/1 3", state + " 1", state.substr(0, state.size() / 2),
                             "online-linear/2 -4" + state.substr(state.find(' ', 16)),
                             "online-linear/2 5 nan" + state.substr(state.find(' ', 18)),
                             state + std::string(5000, ' '),
                             "online-linear/2 0 0" + [] {  // a P with a zero diagonal
                               std::string zeros;
                               for (int i = 0; i < 7 + 49; ++i) zeros += " 0";
                               return zeros;
                             }(),
                             "online-linear/2 1125899906842625" + state.substr(state.find(' ', 16)),  // N > 2^50
                             "online-linear/1" + state.substr(15)};  // a valid state of the ln(tasks) model
  REQUIRE(state.substr(0, 15) == "online-linear/2");
  for (const std::string& text : bad) {
    CAPTURE(text.substr(0, 40));
    CHECK_FALSE(c.RestoreModel(text));
    CHECK(c.ModelState() == fresh);  // unchanged
  }
  UserMeanPredictor um;
  CHECK(um.ModelState().empty());
  CHECK(um.RestoreModel(""));
  CHECK_FALSE(um.RestoreModel(state));
}

TEST_CASE("MakePredictor knows the policy's predictor names", "[predictor]") {
  CHECK(dynamic_cast<UserMeanPredictor*>(MakePredictor("user-mean", 2, 1.0).get()) != nullptr);
  CHECK(dynamic_cast<OnlineLinearPredictor*>(MakePredictor("online-linear", 2, 1.0).get()) != nullptr);
  CHECK(MakePredictor("oracle", 2, 1.0) == nullptr);
}

namespace {
JobFeatures Shaped(const std::string& user, Duration limit, int32_t ntasks, int64_t cpu_millis) {
  JobFeatures f{user, limit, ntasks, {}};
  f.per_task.cpu_millis = cpu_millis;
  return f;
}
}  // namespace

TEST_CASE("history by request predicts from the user's jobs with the same request, else from all of theirs",
          "[predictor]") {
  UserMeanPredictor p(2, 1.0, {}, HistoryBy::kRequest);
  CHECK(p.history_by() == HistoryBy::kRequest);
  const JobFeatures small = Shaped("alice", 3600, 1, 1000), big = Shaped("alice", 86400, 8, 4000);
  p.Observe(small, 100);
  p.Observe(big, 50000);
  p.Observe(small, 300);
  CHECK(p.Predict(small) == 200);    // its template: 100 and 300
  CHECK(p.Predict(big) == 50000);    // its template: 50000 alone
  CHECK(p.Predict(Shaped("alice", 86400, 2, 1000)) == 25150);  // no template yet: the user's last two
  CHECK(p.Predict(Shaped("bob", 7200, 1, 1000)) == 7200);      // no history: the time limit
  CHECK(p.history().runs.at("alice") == std::deque<Duration>{50000, 300});
  CHECK(p.history().runs.at(RequestTemplateKey(small)) == std::deque<Duration>{100, 300});
  CHECK(p.HistoryKeys(small) == std::vector<std::string>{"alice", RequestTemplateKey(small)});
  // By user, the same runs give the user's mean whatever the request.
  UserMeanPredictor by_user(2, 1.0, p.history());
  CHECK(by_user.Predict(big) == 25150);
  CHECK(by_user.Predict(small) == 3600);  // capped at its time limit
  CHECK(by_user.HistoryKeys(small) == std::vector<std::string>{"alice"});
}

TEST_CASE("a request template key names the tasks, per-task resources and time limit", "[predictor]") {
  JobFeatures f = Shaped("alice", 3600, 4, 2000);
  f.per_task.memory_bytes = 1 << 30;
  f.per_task.gpus["a100"] = 2;
  CHECK(RequestTemplateKey(f) == "alice:4x2000m,1073741824B,gpu:a100=2|3600s");
  CHECK(RequestTemplateKey(Shaped("alice", 3601, 4, 2000)) != RequestTemplateKey(Shaped("alice", 3600, 4, 2000)));
  CHECK(ParseHistoryBy("request") == HistoryBy::kRequest);
  CHECK(ParseHistoryBy("user") == HistoryBy::kUser);
  CHECK_FALSE(ParseHistoryBy("shape"));
  CHECK(std::string(HistoryByName(HistoryBy::kRequest)) == "request");
}

TEST_CASE("a user keeps at most kMaxTemplatesPerUser request templates: the least recently used goes",
          "[predictor]") {
  constexpr int kCap = HistoryBook::kMaxTemplatesPerUser;
  UserMeanPredictor p(2, 1.0, {}, HistoryBy::kRequest);
  for (int i = 0; i < kCap; ++i) p.Observe(Shaped("alice", 1000 + i, 1, 1000), 10 + i);
  p.Observe(Shaped("alice", 1000, 1, 1000), 10);  // template 0 is used again: template 1 is now the oldest
  CHECK(p.TakeDroppedHistory().empty());
  p.Observe(Shaped("alice", 5000, 1, 1000), 99);  // one too many
  const std::vector<std::string> dropped = p.TakeDroppedHistory();
  CHECK(dropped == std::vector<std::string>{RequestTemplateKey(Shaped("alice", 1001, 1, 1000))});
  CHECK(p.history().runs.count(dropped[0]) == 0);
  CHECK(p.history().runs.count(RequestTemplateKey(Shaped("alice", 1000, 1, 1000))) == 1);
  CHECK(p.history().runs.size() == static_cast<size_t>(kCap) + 1);  // the templates and the user
  CHECK(p.TakeDroppedHistory().empty());  // reported once
  p.Observe(Shaped("bob", 1000, 1, 1000), 5);  // other users have their own templates
  CHECK(p.TakeDroppedHistory().empty());
  // A history kept from before with too many templates is cut to the cap, and says what it cut:
  // in the order of use its snapshot keeps (a key it does not list counts as the oldest).
  RuntimeHistory h = p.HistorySnapshot();
  CHECK(h.recent.size() == static_cast<size_t>(kCap) + 1);  // alice's and bob's templates
  CHECK(h.recent[kCap - 1] == RequestTemplateKey(Shaped("alice", 5000, 1, 1000)));  // alice's latest last
  h.runs[RequestTemplateKey(Shaped("alice", 1, 1, 1000))] = {1};
  UserMeanPredictor reloaded(2, 1.0, h, HistoryBy::kRequest);
  CHECK(reloaded.TakeDroppedHistory() == std::vector<std::string>{RequestTemplateKey(Shaped("alice", 1, 1, 1000))});
  CHECK(reloaded.history().runs.size() == p.history().runs.size());
  // It goes on from the same order: the next new template drops 1002 s (1000 s was used later).
  reloaded.Observe(Shaped("alice", 6000, 1, 1000), 1);
  CHECK(reloaded.TakeDroppedHistory() == std::vector<std::string>{RequestTemplateKey(Shaped("alice", 1002, 1, 1000))});
  // Without the order, key order: "alice:1x1000m,0B|1000s" is the first key, and goes.
  h.recent.clear();
  h.runs.erase(RequestTemplateKey(Shaped("alice", 1, 1, 1000)));
  UserMeanPredictor unordered(2, 1.0, h, HistoryBy::kRequest);
  unordered.Observe(Shaped("alice", 6000, 1, 1000), 1);
  CHECK(unordered.TakeDroppedHistory() == std::vector<std::string>{RequestTemplateKey(Shaped("alice", 1000, 1, 1000))});
}

TEST_CASE("online-linear reads the request's runs too with history by request", "[predictor]") {
  OnlineLinearPredictor p(2, 1.0, {}, HistoryBy::kRequest);
  const JobFeatures small = Shaped("alice", 3600, 1, 1000), big = Shaped("alice", 86400, 8, 4000);
  p.Observe(small, 100);
  p.Observe(big, 50000);
  // Before the warm-up the user mean is used: of the request's own runs.
  CHECK(p.Predict(small) == 100);
  CHECK(p.Predict(big) == 50000);
  CHECK(dynamic_cast<UserMeanPredictor*>(MakePredictor("user-mean", 2, 1.0, {}, HistoryBy::kRequest).get())
            ->history_by() == HistoryBy::kRequest);
}
