// mlq --explain's block and JSON, and mlq --start's order.
#include <catch2/catch.hpp>

#include "cli/explain_format.h"
#include "cli/json_text.h"
#include "cli/job_format.h"
#include "tests/cli/hostile_text.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

v1::ExplainJobResponse PendingExplain() {
  v1::ExplainJobResponse r;
  auto* j = r.mutable_job();
  j->set_job_id(42);
  j->set_user("alice");
  j->set_state(v1::PENDING);
  j->set_reason("Resources");
  j->set_reason_detail("needs 4 cpus, 1 free");
  j->set_expected_start(0);
  j->set_priority(5120);
  auto* s = j->mutable_spec();
  s->set_name("train");
  s->set_account("research");
  s->set_partition("batch");
  s->set_qos("normal");
  s->set_nice(10);
  r.set_pending(true);
  r.set_queue_order("multifactor");
  r.set_now(1'700'000'000);
  auto* w = r.mutable_weights();
  w->set_age(1000);
  w->set_fairshare(10000);
  w->set_job_size(1000);
  w->set_max_age_s(7 * 24 * 3600);
  auto* f = r.mutable_factors();
  f->set_age(0.25);
  f->set_fairshare(0.5);
  f->set_job_size(0.125);
  f->set_nice(10);
  f->set_priority(5365);  // 250 + 5000 + 125 - 10
  return r;
}

}  // namespace

TEST_CASE("mlq --explain prints reason, detail, expected start and every weighted factor", "[cli][explain]") {
  std::string out = FormatExplain(PendingExplain());
  CHECK_THAT(out, Catch::StartsWith("Job 42 (train) user alice, account research, partition batch, QoS normal: PENDING\n"));
  CHECK_THAT(out, Catch::Contains("Reason:         Resources (needs 4 cpus, 1 free)\n"));
  CHECK_THAT(out, Catch::Contains("Expected start: N/A (unknown)\n"));
  CHECK_THAT(out, Catch::Contains("Queue order:    multifactor\n"));
  CHECK_THAT(out, Catch::Contains("Priority:       5365 (last cycle: 5120)\n"));
  CHECK_THAT(out, Catch::Contains("Fairshare:      0.5000\n"));
  CHECK_THAT(out, Catch::Contains("  FACTOR         WEIGHT    VALUE   WEIGHTED\n"));
  CHECK_THAT(out, Catch::Contains("  age              1000   0.2500      250.0\n"));
  CHECK_THAT(out, Catch::Contains("  fairshare       10000   0.5000     5000.0\n"));
  CHECK_THAT(out, Catch::Contains("  job_size         1000   0.1250      125.0\n"));
  CHECK_THAT(out, Catch::Contains("  qos                 0   0.0000        0.0\n"));
  CHECK_THAT(out, Catch::Contains("  nice                                  -10\n"));
  CHECK_THAT(out, Catch::EndsWith("  PRIORITY                             5365\n"));
}

TEST_CASE("mlq --explain of a job that is not pending has no factors", "[cli][explain]") {
  auto r = PendingExplain();
  r.mutable_job()->set_state(v1::RUNNING);
  r.mutable_job()->set_reason("");
  r.set_pending(false);
  r.clear_factors();
  r.set_queue_order("fifo");
  std::string out = FormatExplain(r);
  CHECK_THAT(out, Catch::Contains(": RUNNING\n"));
  CHECK_THAT(out, !Catch::Contains("Reason:") && !Catch::Contains("FACTOR"));
  CHECK_THAT(out, Catch::Contains("Queue order:    fifo (the queue is ordered by submit time"));
  CHECK_THAT(out, Catch::Contains("Priority:       5120 (no factors: the job is not pending)\n"));
  auto j = ExplainJson(r);
  CHECK(j["state"] == "RUNNING");
  CHECK(j["factors"].is_null());
  CHECK(j["weighted"].is_null());
  CHECK(j["fairshare_factor"].is_null());
  CHECK(j["priority"] == 5120);
}

TEST_CASE("mlq --explain of a pending job schedd gave no factors says why", "[cli][explain]") {
  auto r = PendingExplain();
  r.set_pending(false);
  r.clear_factors();
  std::string out = FormatExplain(r);
  CHECK_THAT(out, Catch::Contains("Reason:         Resources") && !Catch::Contains("FACTOR"));
  CHECK_THAT(out, Catch::Contains("Priority:       5120 (no factors now: the job waits out a launch backoff, or for its last attempt's tasks to exit)\n"));
  CHECK(ExplainJson(r)["factors"].is_null());
}

TEST_CASE("mlq --explain of a held job says how to release it", "[cli][explain]") {
  auto r = PendingExplain();
  r.set_pending(false);
  r.clear_factors();
  r.mutable_job()->mutable_spec()->set_hold(true);
  r.mutable_job()->set_reason("JobHeldUser");
  r.mutable_job()->clear_reason_detail();
  std::string out = FormatExplain(r);
  CHECK_THAT(out, Catch::Contains("Reason:         JobHeldUser\n") && !Catch::Contains("FACTOR"));
  CHECK_THAT(out, Catch::Contains("Priority:       0 (no factors: the job is held; `mladmin release 42` puts it back in the queue)\n"));
}

TEST_CASE("mlq --explain --json has factors, weights and weighted values", "[cli][explain]") {
  auto r = PendingExplain();
  r.mutable_job()->set_expected_start(1'700'000'600);
  auto j = ExplainJson(r);
  CHECK(j["job_id"] == 42);
  CHECK(j["state"] == "PENDING");
  CHECK(j["reason"] == "Resources");
  CHECK(j["reason_detail"] == "needs 4 cpus, 1 free");
  CHECK(j["expected_start"] == 1'700'000'600);
  CHECK(j["queue_order"] == "multifactor");
  CHECK(j["priority"] == 5365);
  CHECK(j["fairshare_factor"] == 0.5);
  CHECK(j["factors"]["age"] == 0.25);
  CHECK(j["factors"]["job_size"] == 0.125);
  CHECK(j["weights"]["fairshare"] == 10000);
  CHECK(j["weights"]["max_age"] == 7 * 24 * 3600);
  CHECK(j["weighted"]["fairshare"] == 5000.0);
  CHECK(j["nice"] == 10);
  CHECK(j["computed_at"] == 1'700'000'000);
  CHECK(FormatExplain(r).find("Expected start: N/A") == std::string::npos);
}

TEST_CASE("mlq --start orders known expected starts first, earliest first, unknown last", "[cli][explain]") {
  std::vector<v1::JobInfo> jobs(4);
  jobs[0].set_job_id(1);                     // unknown
  jobs[1].set_job_id(2);
  jobs[1].set_expected_start(300);
  jobs[2].set_job_id(3);
  jobs[2].set_expected_start(100);
  jobs[3].set_job_id(4);
  jobs[3].set_expected_start(300);
  std::sort(jobs.begin(), jobs.end(), StartOrderLess);
  std::vector<int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.job_id());
  CHECK(ids == std::vector<int64_t>{3, 2, 4, 1});

  auto format = ParseJobFormat(kStartJobFormat);
  REQUIRE(format);
  CHECK(FormatJobHeader(*format.value) ==
        "     JOBID PARTITION         NAME     USER ST          START_TIME  TASKS NODELIST(REASON)");
  v1::JobInfo p;
  p.set_job_id(7);
  p.set_state(v1::PENDING);
  p.set_reason("Priority");
  CHECK_THAT(FormatJobLine(*format.value, p, 0), Catch::Contains(" PD                 N/A ") &&
                                                     Catch::EndsWith("(Priority)"));
}

TEST_CASE("mlq --explain shows an elastic job's latest size change", "[cli][explain][elastic]") {
  auto r = PendingExplain();
  r.mutable_job()->set_state(v1::RUNNING);
  r.set_pending(false);
  r.clear_factors();
  CHECK_THAT(FormatExplain(r), !Catch::Contains("Resized:"));
  r.mutable_job()->set_resize("shrunk 4->3 after eviction of spot-1 (attempt 2)");
  CHECK_THAT(FormatExplain(r), Catch::Contains("  Resized:        shrunk 4->3 after eviction of spot-1 (attempt 2)\n"));
  CHECK(ExplainJson(r)["resize"] == "shrunk 4->3 after eviction of spot-1 (attempt 2)");
}

TEST_CASE("mlq --explain escapes every text schedd sends", "[cli][explain][security]") {
  using testing::kHostile;
  using testing::kHostileEscaped;
  auto r = PendingExplain();
  auto* j = r.mutable_job();
  j->set_user(kHostile);
  j->set_reason(kHostile);
  j->set_reason_detail(kHostile);
  j->set_resize(kHostile);
  r.set_start_basis(kHostile);
  r.set_queue_order(kHostile);
  auto* s = j->mutable_spec();
  for (auto* field : {s->mutable_name(), s->mutable_account(), s->mutable_partition(), s->mutable_qos()}) *field = kHostile;
  const std::string out = FormatExplain(r);
  CHECK(testing::Inert(out));
  const std::string e = kHostileEscaped;
  CHECK_THAT(out, Catch::StartsWith("Job 42 (" + e + ") user " + e + ", account " + e + ", partition " + e + ", QoS " + e +
                                    ": PENDING\n"));
  for (const std::string& part : {"Reason:         " + e + " (" + e + ")\n", "Start rests on: " + e + "\n",
                                 "Resized:        " + e + "\n", "Queue order:    " + e + "\n"})
    CHECK_THAT(out, Catch::Contains(part));
  r.mutable_job()->set_state(v1::RUNNING);  // the "Reason:" line of a job that is not pending
  CHECK(testing::Inert(FormatExplain(r)));
  const std::string json = JsonText(ExplainJson(r), 2);
  CHECK(testing::Inert(json));
  CHECK(nlohmann::json::parse(json)["reason_detail"].get<std::string>().starts_with("\x1b]0;pwned"));
}
