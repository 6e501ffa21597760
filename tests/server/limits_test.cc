// Bounded input (issue 13, point 3): every field of a job spec, arrays x spec size, per-user
// pending jobs and submission rate. Over-limit input gets an error naming the field and the limit,
// and nothing is stored.
#include <catch2/catch.hpp>

#include "schedd/policy/policy_loader.h"
#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

struct World : ControllerWorld {
  Caller alice = User("alice", 1001);

  explicit World(const std::string& policy = "enforce_associations = false\n") {
    Start(PolicyFromText(policy, "limits.toml"));
  }
  Status Submit(const v1::JobSpec& spec, const Caller& who) {
    int64_t id = 0;
    return ctl->Submit(who, spec, now, &id);
  }
  size_t Jobs() { return ListAll(*ctl, Root(), v1::ListJobsRequest{}).size(); }
};

}  // namespace

TEST_CASE("over-limit fields are refused, naming the field and the limit, and store nothing", "[server][limits]") {
  World w;
  struct Case {
    const char* what;
    std::function<void(v1::JobSpec&)> grow;
    const char* key;
  };
  const Case cases[] = {
      {"a 20 MiB job name", [](v1::JobSpec& s) { s.set_name(std::string(20 << 20, 'n')); }, "max_name_bytes"},
      {"a 5 MiB script", [](v1::JobSpec& s) { s.clear_argv(); s.set_script(std::string(5 << 20, '#')); }, "max_script_bytes"},
      {"2 MiB of environment", [](v1::JobSpec& s) { (*s.mutable_env())["BIG"] = std::string(2 << 20, 'e'); }, "max_env_bytes"},
      {"5000 variables", [](v1::JobSpec& s) { for (int i = 0; i < 5000; ++i) (*s.mutable_env())["V" + std::to_string(i)] = "1"; }, "max_env_vars"},
      {"5000 arguments", [](v1::JobSpec& s) { for (int i = 0; i < 5000; ++i) s.add_argv("a"); }, "max_argv"},
      {"a 200 KiB argument", [](v1::JobSpec& s) { s.add_argv(std::string(200 << 10, 'a')); }, "max_argv_bytes"},
      {"an 8 KiB workdir", [](v1::JobSpec& s) { s.set_workdir("/" + std::string(8 << 10, 'd')); }, "max_field_bytes"},
      {"a 1 MiB dependency", [](v1::JobSpec& s) { s.set_dependency("afterok:" + std::string(1 << 20, '1')); }, "max_field_bytes"},
      {"300 gpu types", [](v1::JobSpec& s) { for (int i = 0; i < 300; ++i) s.add_gpu_types("h100"); }, "max_list_items"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    v1::JobSpec spec = Spec(1);
    c.grow(spec);
    Status st = w.Submit(spec, w.alice);
    CHECK(st.code == Status::kInvalidArgument);
    CHECK_THAT(st.message, Catch::Contains(std::string("policy [limits] ") + c.key));
  }
  CHECK(w.Jobs() == 0);
}

TEST_CASE("an array may not multiply a large spec past max_array_bytes", "[server][limits]") {
  World w;
  v1::JobSpec spec = Spec(1);
  spec.clear_argv();
  spec.set_script(std::string(3 << 20, '#'));  // under the script limit
  spec.set_array("0-99");                      // but 100 copies are 300 MiB
  Status st = w.Submit(spec, w.alice);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("max_array_bytes"));
  CHECK(w.Jobs() == 0);
  spec.set_array("0-9");
  CHECK(w.Submit(spec, w.alice).ok());
  CHECK(w.Jobs() == 10);
}

TEST_CASE("per-user pending jobs and submission rate are capped, operators are not", "[server][limits]") {
  World w("enforce_associations = false\n[limits]\nmax_pending_jobs_per_user = 5\nsubmit_rate_per_user = 2\n"
          "submit_burst_per_user = 3\n");
  v1::JobSpec spec = Spec(1);
  spec.set_hold(true);
  SECTION("the rate: a burst of 3, then 2 a second") {
    for (int i = 0; i < 3; ++i) CHECK(w.Submit(spec, w.alice).ok());
    Status st = w.Submit(spec, w.alice);
    CHECK(st.code == Status::kResourceExhausted);
    CHECK_THAT(st.message, Catch::Contains("submit_rate_per_user"));
    w.now += 1;
    CHECK(w.Submit(spec, w.alice).ok());
    CHECK(w.Submit(spec, w.alice).ok());
    CHECK(w.Submit(spec, w.alice).code == Status::kResourceExhausted);
    CHECK(w.Submit(spec, User("bob", 1002)).ok());  // buckets are per user
  }
  SECTION("pending jobs: 5, arrays count each element, the cycle recounts") {
    w.now += 100;
    for (int i = 0; i < 3; ++i) CHECK(w.Submit(spec, w.alice).ok());
    v1::JobSpec arr = spec;
    arr.set_array("0-2");
    Status st = w.Submit(arr, w.alice);  // 3 + 3 > 5
    CHECK(st.code == Status::kResourceExhausted);
    CHECK_THAT(st.message, Catch::Contains("has 3 pending jobs") && Catch::Contains("max_pending_jobs_per_user"));
    w.now += 100;
    CHECK(w.Submit(spec, w.alice).ok());
    CHECK(w.Submit(spec, w.alice).ok());
    w.now += 100;
    CHECK(w.Submit(spec, w.alice).code == Status::kResourceExhausted);
    v1::CancelJobsRequest cancel;
    cancel.set_user("alice");
    w.ctl->Cancel(w.alice, cancel, w.now);
    w.ctl->RunCycle(w.now);  // recounts: none pending
    CHECK(w.Submit(spec, w.alice).ok());
    for (int i = 0; i < 10; ++i) CHECK(w.Submit(spec, Root()).ok());  // privileged callers skip both
  }
}

TEST_CASE("the [limits] table is validated with FILE:LINE", "[server][limits][policy]") {
  auto r = mlsched::policy::ParsePolicy("[limits]\nmax_script_bytes = \"big\"\nmax_envs = 3\n", "limits.toml");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.ErrorText(), Catch::Contains("limits.toml:2") && Catch::Contains("max_script_bytes"));
  CHECK_THAT(r.ErrorText(), Catch::Contains("limits.toml:3") && Catch::Contains("unknown key 'max_envs'"));
  auto ok = mlsched::policy::ParsePolicy("[limits]\nmax_script_bytes = 1048576\nmax_ids_per_request = 50\n", "limits.toml");
  REQUIRE(ok.ok());
  CHECK(ok.policy->limits.max_script_bytes == 1 << 20);
  CHECK(ok.policy->limits.max_ids_per_request == 50);
  CHECK(ok.policy->limits.max_name_bytes == 1024);  // defaults for the rest
}

TEST_CASE("a retried submission returns its job even at the pending limit, and counts once", "[server][limits][idempotency]") {
  World w("enforce_associations = false\n[limits]\nmax_pending_jobs_per_user = 2\nsubmit_rate_per_user = 0\n");
  v1::JobSpec spec = Spec(1);
  spec.set_hold(true);
  int64_t a = 0, again = 0, b = 0, c = 0;
  REQUIRE(w.ctl->Submit(w.alice, spec, w.now, &a, "key-a").ok());
  for (int i = 0; i < 3; ++i) {  // lost answers: the client retries with the same key
    REQUIRE(w.ctl->Submit(w.alice, spec, w.now, &again, "key-a").ok());
    CHECK(again == a);
  }
  REQUIRE(w.ctl->Submit(w.alice, spec, w.now, &b, "key-b").ok());  // the retries did not count
  CHECK(b != a);
  // At the limit now: a retry of either still returns its job; a new submission is refused.
  REQUIRE(w.ctl->Submit(w.alice, spec, w.now, &again, "key-a").ok());
  CHECK(again == a);
  REQUIRE(w.ctl->Submit(w.alice, spec, w.now, &again, "key-b").ok());
  CHECK(again == b);
  CHECK(w.ctl->Submit(w.alice, spec, w.now, &c, "key-c").code == Status::kResourceExhausted);
  CHECK(w.Jobs() == 2);
}
