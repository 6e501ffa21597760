// Security part 3 (issue 29) in the controller: what comes back from the store is checked as if a
// client sent it (forged rows are quarantined, never run), root's jobs run only on nodes that allow
// them, an operator's hold binds the owner, spec lists and text are bounded and printable, listing
// is paged, and the node inventory decides what a node holds.
#include <catch2/catch.hpp>

#include "schedd/server/admission.h"
#include "schedd/server/controller.h"
#include "schedd/server/listing.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

struct World : ControllerWorld {
  Caller alice = User("alice", 1001), bob = User("bob", 1002);
  Caller ops = User("ops", 1003, true);

  explicit World(const std::string& policy = "enforce_associations = false\n", int nodes = 2) {
    Start(PolicyFromText(policy, "policy.toml"));
    for (int i = 1; i <= nodes; ++i) ctl->OnRegister(NodeReg("n" + std::to_string(i), 4), now);
  }
  Status Submit(const v1::JobSpec& spec, const Caller& who, int64_t* id = nullptr) {
    int64_t ignored = 0;
    return ctl->Submit(who, spec, now, id ? id : &ignored);
  }
  v1::JobInfo Job(int64_t id) {
    v1::JobInfo info;
    REQUIRE(ctl->Get(Root(), id, &info).ok());
    return info;
  }
  /// A new controller over the same store, as after a restart or an HA takeover.
  void Restart() {
    Start(PolicyFromText("enforce_associations = false\n", "policy.toml"));
    ctl->Recover(now);
    for (int i = 1; i <= 2; ++i) ctl->OnRegister(NodeReg("n" + std::to_string(i), 4), now);
  }
  /// Prepare messages sent for `job` so far, on any node.
  size_t Prepares(int64_t job) {
    size_t n = 0;
    for (const char* node : {"n1", "n2", "r1"})
      for (const auto& m : sink.Of(node, v1::SchedulerMessage::kPrepare))
        if (m.prepare().job_id() == job) ++n;
    return n;
  }
};

/// Runs `sql` on the store's SQLite file behind schedd's back (an intruder with the file).
void Tamper(const TempDir& dir, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir.path / "state.db").string().c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  sqlite3_free(err);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

}  // namespace

TEST_CASE("a stored row rewritten to another uid or a bad spec is quarantined on recovery and never runs",
          "[server][security]") {
  World w;
  int64_t held = 0, spec_forged = 0, fine = 0;
  v1::JobSpec spec = Spec(1);
  spec.set_hold(true);
  REQUIRE(w.Submit(spec, w.alice, &held).ok());
  REQUIRE(w.Submit(spec, w.alice, &spec_forged).ok());
  REQUIRE(w.Submit(Spec(1), w.bob, &fine).ok());
  // An intruder with write access to the store: alice's job now claims uid 0 (root) and names
  // alice, and another's spec carries a terminal escape in its name and 300 GPU types.
  Tamper(w.dir, "UPDATE jobs SET uid = 0 WHERE id = " + std::to_string(held));
  JobRow other = *w.store->LoadJob(spec_forged);
  v1::JobSpec bad = Spec(1);
  bad.set_name("\x1b]0;owned\x07");
  other.spec = bad.SerializeAsString();
  w.store->UpdateJob(other).get();
  w.Restart();
  w.ctl->Hold(w.alice, held, true, w.now);  // releasing changes nothing: it is FAILED
  w.ctl->RunCycle(w.now);
  for (int64_t id : {held, spec_forged}) {
    INFO("job " << id);
    CHECK(w.Job(id).state() == v1::FAILED);
    CHECK(w.Job(id).reason() == "StoredRowRejected");
    CHECK(w.Prepares(id) == 0);
  }
  CHECK(w.Job(fine).state() == v1::RUNNING);
  CHECK(HasEvent(EventsOf(w.dir, held), "quarantine|it names user 'alice' with uid 0, which is 'root' on this host"));
}

TEST_CASE("a spec rewritten in the store while the job waits is checked again before it launches",
          "[server][security]") {
  World w;
  int64_t id = 0;
  v1::JobSpec spec = Spec(1);
  spec.set_hold(true);
  REQUIRE(w.Submit(spec, w.alice, &id).ok());
  JobRow row = *w.store->LoadJob(id);
  v1::JobSpec forged = Spec(1);
  for (int i = 0; i < 300; ++i) forged.add_gpu_types(std::string(4096, 'g'));
  row.spec = forged.SerializeAsString();
  w.store->UpdateJob(row).get();
  REQUIRE(w.ctl->Hold(w.alice, id, true, w.now).ok());  // release: the next cycle starts it
  w.ctl->RunCycle(w.now);
  CHECK(w.Job(id).state() == v1::FAILED);
  CHECK(w.Job(id).reason() == "StoredRowRejected");
  CHECK(w.Prepares(id) == 0);
}

TEST_CASE("root's jobs: refused with a clear error when no node allows them, placed only on nodes that do",
          "[server][security]") {
  World w;
  Status st = w.Submit(Spec(1), Root());
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("--allow-root-jobs"));
  v1::RegisterNode r1 = NodeReg("r1", 4);
  r1.set_root_jobs(true);
  w.ctl->OnRegister(r1, w.now);
  int64_t id = 0;
  REQUIRE(w.Submit(Spec(1), Root(), &id).ok());
  int64_t second = 0;
  REQUIRE(w.Submit(Spec(1, 4), Root(), &second).ok());  // needs the whole root node: waits for it
  w.ctl->RunCycle(w.now);
  REQUIRE(w.Job(id).state() == v1::RUNNING);
  CHECK(w.Job(id).tasks(0).node() == "r1");
  CHECK(w.Job(second).state() == v1::PENDING);  // n1 and n2 are free, but refuse root
  CHECK(w.Prepares(second) == 0);
  bool listed = false;
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == "r1") listed = n.root_jobs();
  CHECK(listed);
}

TEST_CASE("an operator's hold on another user's job is an admin hold its owner cannot release", "[server][security]") {
  World w;
  int64_t id = 0;
  REQUIRE(w.Submit(Spec(1), w.alice, &id).ok());
  REQUIRE(w.ctl->Hold(w.ops, id, false, w.now).ok());
  CHECK(w.Job(id).reason() == "JobHeldAdmin");
  Status st = w.ctl->Hold(w.alice, id, true, w.now);
  CHECK(st.code == Status::kPermissionDenied);
  CHECK_THAT(st.message, Catch::Contains("only an operator may release it"));
  CHECK(w.Job(id).reason() == "JobHeldAdmin");
  w.Restart();  // the admin hold is stored
  CHECK(w.Job(id).reason() == "JobHeldAdmin");
  CHECK(w.ctl->Hold(w.alice, id, true, w.now).code == Status::kPermissionDenied);
  REQUIRE(w.ctl->Hold(w.ops, id, true, w.now).ok());
  CHECK(w.Job(id).reason() == "None");
  // The owner's own hold stays the owner's to release.
  REQUIRE(w.ctl->Hold(w.alice, id, false, w.now).ok());
  CHECK(w.Job(id).reason() == "JobHeldUser");
  REQUIRE(w.ctl->Hold(w.alice, id, true, w.now).ok());
}

TEST_CASE("GPU type lists are short, short-named and name types the cluster has, text fields are printable",
          "[server][security][limits]") {
  World w("enforce_associations = false\n", 0);
  w.ctl->OnRegister(NodeReg("g1", 4, 8, "h100"), w.now);
  auto with_types = [](std::vector<std::string> types) {
    v1::JobSpec s = Spec(1);
    for (auto& t : types) s.add_gpu_types(t);
    return s;
  };
  // The attack of issue 29: 256 names of 4 KiB on a job that asks for no GPU.
  std::vector<std::string> many(256, std::string(4096, 'x'));
  Status st = w.Submit(with_types(many), w.alice);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("max_list_items"));
  st = w.Submit(with_types({std::string(65, 'h')}), w.alice);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("at most 64"));
  st = w.Submit(with_types({"a100"}), w.alice);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("unknown GPU type 'a100'") && Catch::Contains("types: h100"));
  CHECK(w.Submit(with_types({"h100"}), w.alice).ok());
  v1::JobSpec fallback = Spec(1, 1, 1);
  auto* tier = fallback.add_fallback();
  tier->set_accelerator("mi300");
  tier->set_after_s(60);
  CHECK_THAT(w.Submit(fallback, w.alice).message, Catch::Contains("unknown GPU type 'mi300'"));
  tier->set_accelerator("cpu");
  CHECK(w.Submit(fallback, w.alice).ok());

  for (const std::string& name : {std::string("\x1b[2Jfake"), std::string("a\rb"), std::string("csi\xc2\x9b" "31m"),
                                  std::string("bad\xff utf8"), std::string("del\x7f")}) {
    v1::JobSpec s = Spec(1);
    s.set_name(name);
    st = w.Submit(s, w.alice);
    CHECK(st.code == Status::kInvalidArgument);
    CHECK_THAT(st.message, Catch::Contains("job name holds a control character or invalid UTF-8"));
  }
  v1::JobSpec utf8 = Spec(1);
  utf8.set_name("训练-größe-🚀");
  CHECK(w.Submit(utf8, w.alice).ok());
  v1::JobSpec env = Spec(1);
  (*env.mutable_env())["A=B"] = "x";
  CHECK_THAT(w.Submit(env, w.alice).message, Catch::Contains("environment variable name"));
}

TEST_CASE("the specs of one user's pending jobs have a byte budget", "[server][limits]") {
  World w("enforce_associations = false\n[limits]\nmax_pending_bytes_per_user = 20000\n");
  v1::JobSpec s = Spec(1);
  s.set_script("#!/bin/sh\n" + std::string(6000, '#') + "\n");
  s.clear_argv();
  s.set_hold(true);
  int accepted = 0;
  Status st;
  for (int i = 0; i < 10 && (st = w.Submit(s, w.alice)).ok(); ++i) ++accepted;
  CHECK(accepted == 3);
  CHECK(st.code == Status::kResourceExhausted);
  CHECK_THAT(st.message, Catch::Contains("max_pending_bytes_per_user"));
  CHECK(w.Submit(s, w.bob).ok());     // per user
  CHECK(w.Submit(s, Root()).code != Status::kResourceExhausted);  // the per-user limits skip root
  w.ctl->RunCycle(w.now);             // a recount keeps the same figure
  CHECK(w.Submit(s, w.alice).code == Status::kResourceExhausted);
}

TEST_CASE("ListJobs answers in bounded pages of summaries that a token continues", "[server][security]") {
  World w;
  v1::JobSpec s = Spec(1);
  s.set_hold(true);
  (*s.mutable_env())["SECRET"] = "x";
  std::vector<int64_t> ids;
  for (int i = 0; i < 12; ++i) {
    int64_t id = 0;
    REQUIRE(w.Submit(s, w.alice, &id).ok());
    ids.push_back(id);
  }
  v1::ListJobsRequest req;
  req.set_page_size(5);
  std::vector<int64_t> seen;
  int pages = 0;
  for (;; ++pages) {
    v1::ListJobsResponse resp;
    REQUIRE(w.ctl->List(w.alice, req, w.now, &resp).ok());
    CHECK(resp.jobs_size() <= 5);
    for (const auto& j : resp.jobs()) {
      seen.push_back(j.job_id());
      CHECK(j.spec().env().empty());  // summaries, even for the owner
    }
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  CHECK(seen == ids);
  CHECK(pages == 2);
  req.set_page_token("12; DROP TABLE jobs");
  v1::ListJobsResponse resp;
  CHECK(w.ctl->List(w.alice, req, w.now, &resp).code == Status::kInvalidArgument);
  CHECK(PageSize(0) == kMaxListPageJobs);
  CHECK(PageSize(1 << 30) == kMaxListPageJobs);
}

TEST_CASE("a page stops at its byte cap and never skips a job another source may still hold", "[server]") {
  auto job = [](int64_t id, size_t name_bytes) {
    v1::JobInfo j;
    j.set_job_id(id);
    j.mutable_spec()->set_name(std::string(name_bytes, 'n'));
    return j;
  };
  ListSource big;
  for (int64_t id = 1; id <= 5; ++id) big.jobs.push_back(job(id, 3 << 20));
  v1::ListJobsResponse resp;
  FillPage({big}, 100, &resp);
  CHECK(resp.jobs_size() == 2);  // 3 MiB each: a third would pass kMaxListPageBytes
  CHECK(resp.next_page_token() == "2");
  // Memory was read only up to id 10 (page full); the store holds 11 and 12: the page ends at 10.
  ListSource memory{{job(1, 1), job(10, 1)}, 10}, store{{job(3, 1), job(11, 1), job(12, 1)}, INT64_MAX};
  v1::ListJobsResponse merged;
  FillPage({memory, store}, 100, &merged);
  REQUIRE(merged.jobs_size() == 3);
  CHECK(merged.jobs(2).job_id() == 10);
  CHECK(merged.next_page_token() == "10");
}

TEST_CASE("the node inventory refuses or clamps a registration above its declaration and drains a node whose capacity changed",
          "[server][security][inventory]") {
  const std::string policy = R"(enforce_associations = false
[inventory]
strict = true
[[nodes]]
names = "od-[1-2]"
pool = "on-demand"
cpus = 4
memory = "16G"
gpus = "h100:8"
features = ["nvlink"]
)";
  World w(policy, 0);
  auto reg = [](const std::string& name, int cpus, int gpus) { return NodeReg(name, cpus, gpus, "h100"); };
  CHECK(w.ctl->AdmitNode(reg("od-1", 4, 8), false).error.empty());
  // A rogue agent with od-1's certificate claims 1,024 CPUs and 64 H100s.
  InventoryVerdict v = w.ctl->AdmitNode(reg("od-1", 1024, 64), false);
  CHECK_THAT(v.error, Catch::Contains("registers more than the inventory declares") && Catch::Contains("cpus 1024 (declared 4)") &&
                          Catch::Contains("gpus h100:64 (declared 8)"));
  CHECK_THAT(w.ctl->AdmitNode(reg("rogue", 4, 0), false).error, Catch::Contains("not in the policy's node inventory"));
  v1::RegisterNode spot = reg("od-2", 4, 8);
  spot.set_pool(v1::POOL_SPOT);
  CHECK_THAT(w.ctl->AdmitNode(spot, false).error, Catch::Contains("declares on-demand"));
  v1::RegisterNode other_type = NodeReg("od-2", 4, 8, "b200");
  CHECK_THAT(w.ctl->AdmitNode(other_type, false).error, Catch::Contains("gpus b200:8 (declared 0)"));

  w.ctl->OnRegister(reg("od-1", 4, 8), w.now);
  w.ctl->OnRegister(reg("od-1", 2, 8), w.now + 10);  // the same node, re-registered smaller
  bool drained = false;
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == "od-1") {
      drained = n.state() == "DRAIN";
      CHECK_THAT(n.reason(), Catch::Contains("capacity changed between registrations: cpus 2 (was 4)"));
    }
  CHECK(drained);


  std::string clamping = policy;
  clamping.replace(clamping.find("strict = true"), 13, "strict = true\nover_capacity = \"clamp\"");
  World c(clamping, 0);
  InventoryVerdict cut = c.ctl->AdmitNode(reg("od-1", 1024, 64), false);
  CHECK(cut.error.empty());
  CHECK(cut.admitted.capacity().cpu_millis() == 4000);
  REQUIRE(cut.admitted.capacity().gpus_size() == 1);
  CHECK(cut.admitted.capacity().gpus(0).count() == 8);
  CHECK_THAT(cut.clamped, Catch::Contains("cpus 1024"));
  // An operator's agent on the Unix socket may register only declared nodes.
  World open("enforce_associations = false\n", 0);
  CHECK_THAT(open.ctl->AdmitNode(reg("anything", 4, 0), true).error, Catch::Contains("only nodes the policy's"));
  CHECK(open.ctl->AdmitNode(reg("anything", 4, 0), false).error.empty());  // not strict: as before
}
