// Attacks on other users' jobs and on the policy (issue 12, points 4 and 5): reading another
// user's environment and script, charging accounts one is not in, picking a QoS or partition one
// may not use, raising one's priority with a negative nice. (State file modes: store_test.cc.)
#include <catch2/catch.hpp>

#include "schedd/policy/policy_loader.h"
#include "schedd/server/controller.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

// Line numbers matter: refusals cite them (see LineOf).
const std::string kPolicy = R"(operators = ["ops"]
default_partition = "gpu"
default_qos = "normal"

[[partitions]]
name = "gpu"

[[partitions]]
name = "restricted"
allow_accounts = ["physics"]
allow_qos = ["normal"]

[[qos]]
name = "normal"

[[qos]]
name = "high"
preempt = ["normal"]

[[qos]]
name = "scavenger"

[[accounts]]
name = "physics"
users = ["bob", "carol"]

[[accounts]]
name = "biology"
users = { alice = 2 }
allow_qos = ["normal", "scavenger"]

[[accounts]]
name = "genomics"
parent = "biology"
users = ["alice"]

[[accounts]]
name = "chem"
users = ["alice", "bob"]

[[users]]
name = "bob"
default_account = "chem"
)";

core::PolicySet Load(const std::string& text) {
  auto r = mlsched::policy::ParsePolicy(text, "cluster.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  return *r.policy;
}

struct World {
  TempDir dir;
  std::unique_ptr<Store> store = std::make_unique<Store>(dir.path.string());
  RecordingSink sink;
  ControllerConfig cfg;
  std::unique_ptr<Controller> ctl;
  int64_t now = 1'000'000;
  Caller alice = User("alice", 1001), bob = User("bob", 1002), dave = User("dave", 1004);
  Caller ops = User("ops", 1003, true);

  explicit World(const std::string& policy = kPolicy) {
    ctl = std::make_unique<Controller>(*store, sink, Load(policy), cfg);
  }
  // Submits `spec` as `who` with the given account, QoS and partition ("" = none given).
  Status Try(const Caller& who, const std::string& account, const std::string& qos = "",
             const std::string& partition = "", int64_t* id = nullptr) {
    v1::JobSpec spec = Spec(1);
    spec.set_account(account);
    spec.set_qos(qos);
    spec.set_partition(partition);
    int64_t ignored = 0;
    return ctl->Submit(who, spec, now, id ? id : &ignored);
  }
  v1::JobInfo Get(const Caller& who, int64_t id) {
    v1::JobInfo info;
    REQUIRE(ctl->Get(who, id, &info).ok());
    return info;
  }
};

v1::JobSpec SecretSpec() {
  v1::JobSpec s = Spec(1);
  s.set_name("train");
  s.set_account("biology");
  s.set_script("#!/bin/sh\naws s3 cp s3://bucket/ckpt .\n");
  (*s.mutable_env())["AWS_SECRET_ACCESS_KEY"] = "wJalrXUtnFEMI";
  s.add_argv("--token=hunter2");
  s.set_stdout_pattern("out-%j.txt");
  return s;
}

void CheckRedacted(const v1::JobInfo& info) {
  CHECK(info.spec().env().empty());
  CHECK(info.spec().script().empty());
  CHECK(info.spec().argv().empty());
  // The public fields stay, as squeue / scontrol show them.
  CHECK(info.spec().name() == "train");
  CHECK(info.spec().account() == "biology");
  CHECK(info.spec().partition() == "gpu");
  CHECK(info.user() == "alice");
}

void CheckFull(const v1::JobInfo& info) {
  CHECK(info.spec().env().at("AWS_SECRET_ACCESS_KEY") == "wJalrXUtnFEMI");
  CHECK(info.spec().script().find("aws s3 cp") != std::string::npos);
  CHECK(info.spec().argv_size() == 2);
  CHECK(info.spec().workdir() == "/tmp");
  CHECK(info.spec().stdout_pattern() == "out-%j.txt");
}

}  // namespace

TEST_CASE("another user's job shows no environment, script or argv, its owner and operators do", "[security]") {
  World w;
  int64_t id = 0;
  REQUIRE(w.ctl->Submit(w.alice, SecretSpec(), w.now, &id).ok());
  CheckRedacted(w.Get(w.bob, id));  // GetJob and ExplainJob (mladmin show job, mlq --explain)
  CheckFull(w.Get(w.alice, id));
  CheckFull(w.Get(w.ops, id));
  // The same uid is not enough: TCP users unknown to the host all map to uid 65534.
  CheckRedacted(w.Get(User("mallory", 1001), id));
  v1::CancelJobsRequest cancel;
  cancel.add_job_ids(id);
  CHECK(w.ctl->Cancel(User("mallory", 1001), cancel, w.now).cancelled().empty());
}

TEST_CASE("ListJobs never carries another user's environment, script or argv, live or from disk", "[security]") {
  World w;
  int64_t id = 0;
  REQUIRE(w.ctl->Submit(w.alice, SecretSpec(), w.now, &id).ok());
  v1::CancelJobsRequest cancel;
  cancel.add_job_ids(id);
  REQUIRE(w.ctl->Cancel(w.alice, cancel, w.now).cancelled_size() == 1);
  v1::ListJobsRequest all;
  for (const auto& info : w.ctl->List(w.bob, all)) CheckRedacted(info);
  w.ctl->Tick(w.now + w.cfg.min_job_age_s + 10);  // gone from memory: rows come from disk now
  REQUIRE(w.ctl->JobsInMemory() == 0);
  v1::ListJobsRequest finished;
  finished.set_include_all_finished(true);
  v1::ListJobsRequest by_id;
  by_id.add_job_ids(id);
  for (const auto* req : {&finished, &by_id}) {
    auto others = w.ctl->List(w.bob, *req);
    REQUIRE(others.size() == 1);
    CheckRedacted(others[0]);
    auto mine = w.ctl->List(w.alice, *req);
    REQUIRE(mine.size() == 1);
    CHECK(mine[0].spec().argv_size() == 2);  // the owner's own command line
  }
  CheckRedacted(w.Get(w.bob, id));
  CheckFull(w.Get(w.alice, id));
}
