// Attacks on other users' jobs and on the policy (issue 12, points 4 and 5): reading another
// user's environment and script, charging accounts one is not in, picking a QoS or partition one
// may not use, raising one's priority with a negative nice. (State file modes: store_test.cc.)
#include <catch2/catch.hpp>

#include <algorithm>

#include "schedd/policy/policy_loader.h"
#include "schedd/server/auth.h"
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

// "cluster.toml:N" of the first line of kPolicy containing `needle`.
std::string LineOf(const std::string& text, const std::string& needle) {
  size_t at = text.find(needle);
  REQUIRE(at != std::string::npos);
  return "cluster.toml:" + std::to_string(1 + std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
}

core::PolicySet Load(const std::string& text) { return PolicyFromText(text, "cluster.toml"); }

struct World : ControllerWorld {
  Caller alice = User("alice", 1001), bob = User("bob", 1002), dave = User("dave", 1004);
  Caller ops = User("ops", 1003, true);

  explicit World(const std::string& policy = kPolicy) { Start(Load(policy)); }
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
  for (const auto& info : ListAll(*w.ctl, w.bob, all)) CheckRedacted(info);
  w.ctl->Tick(w.now + w.cfg.min_job_age_s + 10);  // gone from memory: rows come from disk now
  REQUIRE(w.ctl->JobsInMemory() == 0);
  v1::ListJobsRequest finished;
  finished.set_include_all_finished(true);
  v1::ListJobsRequest by_id;
  by_id.add_job_ids(id);
  for (const auto* req : {&finished, &by_id}) {
    auto others = ListAll(*w.ctl, w.bob, *req);
    REQUIRE(others.size() == 1);
    CheckRedacted(others[0]);
    auto mine = ListAll(*w.ctl, w.alice, *req);
    REQUIRE(mine.size() == 1);
    CHECK(mine[0].spec().argv_size() == 2);  // the owner's own command line
  }
  CheckRedacted(w.Get(w.bob, id));
  CheckFull(w.Get(w.alice, id));
}

TEST_CASE("a user may charge only accounts that list them, with the policy line in the refusal", "[security][associations]") {
  World w;
  Status st = w.Try(w.alice, "physics");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK(st.message == "user alice may not use account physics (" + LineOf(kPolicy, "users = [\"bob\", \"carol\"]") +
                          " lists bob, carol); user alice may use: biology, genomics, chem");
  st = w.Try(w.alice, "nosuch");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK(st.message == "account 'nosuch' is not defined in the policy; user alice may use: biology, genomics, chem");
  st = w.Try(w.dave, "");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK_THAT(st.message, Catch::StartsWith("user dave has no account: no [[accounts]] entry lists them"));
  CHECK(w.Try(w.alice, "chem").ok());
  CHECK(w.Try(w.bob, "physics").ok());
  CHECK(w.Try(w.ops, "physics").ok());  // operators are not checked (Slurm administrators)
  CHECK(w.Try(User("root", 0, true), "anything").ok());
}

TEST_CASE("the default account: the user's default_account, else the first account listing them", "[security][associations]") {
  World w;
  int64_t a = 0, b = 0, o = 0;
  REQUIRE(w.Try(w.alice, "", "", "", &a).ok());
  REQUIRE(w.Try(w.bob, "", "", "", &b).ok());
  REQUIRE(w.Try(w.ops, "", "", "", &o).ok());
  CHECK(w.Get(w.alice, a).spec().account() == "biology");
  CHECK(w.Get(w.bob, b).spec().account() == "chem");   // [[users]] default_account, not physics
  CHECK(w.Get(w.ops, o).spec().account() == "default");  // listed nowhere
}

TEST_CASE("accounts and partitions restrict QoS, partitions restrict accounts", "[security][associations]") {
  World w;
  Status st = w.Try(w.alice, "biology", "high");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK(st.message == "account biology does not allow QoS high (" + LineOf(kPolicy, "allow_qos = [\"normal\", \"scavenger\"]") +
                          " allows normal, scavenger)");
  st = w.Try(w.alice, "genomics", "high");  // inherited from its parent
  CHECK(st.message == "account genomics (under biology) does not allow QoS high (" +
                          LineOf(kPolicy, "allow_qos = [\"normal\", \"scavenger\"]") + " allows normal, scavenger)");
  CHECK(w.Try(w.alice, "biology", "scavenger").ok());
  CHECK(w.Try(w.alice, "chem", "high").ok());  // chem lists no QoS: any
  st = w.Try(w.alice, "chem", "", "restricted");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK(st.message == "partition restricted does not allow account chem (" +
                          LineOf(kPolicy, "allow_accounts") + " allows physics)");
  st = w.Try(w.bob, "physics", "high", "restricted");
  CHECK(st.code == Status::kPermissionDenied);
  CHECK(st.message == "partition restricted does not allow QoS high (" + LineOf(kPolicy, "allow_qos = [\"normal\"]") +
                          " allows normal)");
  CHECK(w.Try(w.bob, "physics", "", "restricted").ok());
  CHECK(w.Try(w.ops, "chem", "high", "restricted").ok());
  st = w.Try(w.alice, "chem", "nope");
  CHECK(st.code == Status::kInvalidArgument);
  CHECK(st.message == "unknown QoS 'nope' (QoS: normal, high, scavenger)");
}

TEST_CASE("a negative nice needs root or an operator, whatever the policy", "[security][associations]") {
  for (const char* enforce : {"true", "false"}) {
    World w(std::string("enforce_associations = ") + enforce + "\n" + kPolicy);
    v1::JobSpec spec = Spec(1);
    spec.set_nice(-2'000'000'000);
    int64_t id = 0;
    Status st = w.ctl->Submit(w.alice, spec, w.now, &id);
    CHECK(st.code == Status::kPermissionDenied);
    CHECK(st.message == "a negative nice (-2000000000) needs root or an operator (you are alice)");
    CHECK(w.ctl->Submit(w.ops, spec, w.now, &id).ok());
    spec.set_nice(100);
    CHECK(w.ctl->Submit(w.alice, spec, w.now, &id).ok());
  }
}

TEST_CASE("job arrays go through the same checks", "[security][associations]") {
  World w;
  v1::JobSpec spec = Spec(1);
  spec.set_account("physics");
  spec.set_array("0-9");
  int64_t id = 0;
  CHECK(w.ctl->Submit(w.alice, spec, w.now, &id).code == Status::kPermissionDenied);
  CHECK(w.ctl->JobsInMemory() == 0);
}

TEST_CASE("enforce_associations = false keeps the permissive behaviour, partition lists excepted", "[security][associations]") {
  World w("enforce_associations = false\n" + kPolicy);
  CHECK(w.Try(w.alice, "physics", "high").ok());
  CHECK(w.Try(w.alice, "anything").ok());
  CHECK(w.Try(w.alice, "chem", "nope").ok());  // waits with reason QOSLimit, as before
  int64_t id = 0;
  REQUIRE(w.Try(w.dave, "", "", "", &id).ok());
  CHECK(w.Get(w.dave, id).spec().account() == "default");
  CHECK(w.Try(w.alice, "chem", "", "restricted").code == Status::kPermissionDenied);
}

TEST_CASE("a policy without accounts charges every job to 'default'", "[security][associations]") {
  World w("");
  int64_t id = 0;
  REQUIRE(w.Try(w.alice, "", "", "", &id).ok());
  CHECK(w.Get(w.alice, id).spec().account() == "default");
  Status st = w.Try(w.alice, "physics");  // a fresh fairshare association would dodge usage
  CHECK(st.code == Status::kPermissionDenied);
  CHECK_THAT(st.message, Catch::Contains("the policy defines no [[accounts]]"));
  CHECK(w.Try(w.alice, "default").ok());
}

TEST_CASE("a verified MUNGE credential is taken once, ages out unclaimed, and the store is bounded", "[security]") {
  VerifiedCredentials v;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  mlsched::MungeIdentity alice;
  alice.uid = 1001;
  alice.payload = "mlsched.v1.JobService/ListJobs";
  v.Put("cred-a", alice, t0);
  auto got = v.Take("cred-a");
  REQUIRE(got);
  CHECK(got->uid == 1001);
  CHECK_FALSE(v.Take("cred-a"));  // once
  v.Put("cred-b", alice, t0);
  v.Put("cred-c", alice, t0 + VerifiedCredentials::kTtl + std::chrono::seconds(1));  // b is past its TTL
  CHECK_FALSE(v.Take("cred-b"));
  CHECK(v.Take("cred-c"));
  for (size_t i = 0; i < VerifiedCredentials::kMax + 10; ++i) v.Put("c" + std::to_string(i), alice, t0);
  CHECK(v.Size() <= VerifiedCredentials::kMax);
  CHECK_FALSE(v.Take("c0"));  // the oldest went first
  CHECK(v.Take("c" + std::to_string(VerifiedCredentials::kMax + 9)));
}
