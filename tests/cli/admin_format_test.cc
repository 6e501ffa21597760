// mladmin's node table/JSON and show job.
#include <catch2/catch.hpp>

#include <algorithm>
#include <tuple>

#include "cli/admin_format.h"
#include "cli/json_text.h"
#include "common/safe_text.h"
#include "tests/cli/hostile_text.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

v1::NodeInfo Node(const std::string& name, v1::Pool pool, const std::string& state) {
  v1::NodeInfo n;
  n.set_name(name);
  n.set_pool(pool);
  n.set_state(state);
  n.set_region("eu");
  n.set_zone("eu-1a");
  n.set_domain("nvl0");
  n.mutable_capacity()->set_cpu_millis(64000);
  n.mutable_capacity()->set_memory_bytes(int64_t{512} << 30);
  n.mutable_allocated()->set_cpu_millis(1500);
  n.mutable_allocated()->set_memory_bytes(int64_t{8} << 30);
  return n;
}

}  // namespace

TEST_CASE("the node table shows allocated/total resources per node", "[cli][admin]") {
  auto a = Node("gpu-02", v1::POOL_SPOT, "MIXED");
  auto* g = a.mutable_capacity()->add_gpus();
  g->set_type("h100");
  g->set_count(8);
  g = a.mutable_allocated()->add_gpus();
  g->set_type("h100");
  g->set_count(2);
  a.set_isolation("v1:memory,cpu,pids,devices,freezer");
  a.set_rejected_reports(3);
  a.set_container_runtime("runc 1.1.5");
  auto b = Node("gpu-01", v1::POOL_ON_DEMAND, "DRAIN");
  b.set_reason("bad fan");
  auto c = Node("gpu-03", v1::POOL_SPOT, "IDLE");
  c.set_container_runtime("runc 1.1.5");
  c.set_image_cache_images(2);
  c.set_image_cache_bytes(int64_t{3} << 30);
  std::string table = FormatNodeTable({a, b, c});
  CHECK(table ==
        "NODE    POOL       STATE  CPUS(A/T)  MEM      GPUS(A/T)  DOMAIN  ZONE   REGION  ISOLATION                           RUNTIME                    REJECTED  REASON\n"
        "gpu-01  on-demand  DRAIN  1.5/64     8G/512G  0/0        nvl0    eu-1a  eu      -                                   -                          0         bad fan\n"
        "gpu-02  spot       MIXED  1.5/64     8G/512G  h100:2/8   nvl0    eu-1a  eu      v1:memory,cpu,pids,devices,freezer  runc 1.1.5                 3\n"
        "gpu-03  spot       IDLE   1.5/64     8G/512G  0/0        nvl0    eu-1a  eu      -                                   runc 1.1.5 (2 images, 3G)  0\n");
}

TEST_CASE("node JSON", "[cli][admin]") {
  auto n = Node("a1", v1::POOL_RESERVED, "IDLE");
  n.add_running_jobs(7);
  n.set_isolation("none");
  n.set_agent_version("0.2.0");
  auto* g = n.mutable_capacity()->add_gpus();
  g->set_type("l4");
  g->set_count(4);
  auto j = NodeJson(n);
  CHECK(j["name"] == "a1");
  CHECK(j["pool"] == "reserved");
  CHECK(j["state"] == "IDLE");
  CHECK(j["isolation"] == "none");
  CHECK(j["agent_version"] == "0.2.0");
  CHECK(j["rejected_reports"] == 0);
  CHECK(j["cutoff_timeout_s"] == 0);
  CHECK(j["cpu_millis"] == 64000);
  CHECK(j["cpu_millis_allocated"] == 1500);
  CHECK(j["memory_bytes"] == int64_t{512} << 30);
  CHECK(j["gpus"] == nlohmann::json::parse(R"([{"type":"l4","count":4,"allocated":0}])"));
  CHECK(j["running_jobs"] == nlohmann::json::array({7}));
  CHECK(GpuUsage(v1::Resources(), v1::Resources()) == "0/0");
}

TEST_CASE("show job prints every field", "[cli][admin]") {
  v1::JobInfo job;
  job.set_job_id(42);
  job.set_user("bob");
  job.set_uid(1001);
  job.set_gid(100);
  job.set_state(v1::RUNNING);
  job.set_attempt(2);
  auto* s = job.mutable_spec();
  s->set_name("ddp");
  s->set_ntasks(2);
  s->set_cpu_millis_per_task(2000);
  s->set_workdir("/work");
  s->set_script("#!/bin/sh\necho hi\n");
  s->mutable_env()->insert(google::protobuf::MapPair<std::string, std::string>("EPOCHS", "3"));
  for (int r = 0; r < 2; ++r) {
    auto* t = job.add_tasks();
    t->set_rank(r);
    t->set_node(r ? "n2" : "n1");
    t->add_gpu_indices(r);
  }
  std::string text = FormatJobDetail(job, 0);
  for (const char* part : {"JobId=42 JobName=ddp", "UserId=bob(1001) GroupId=100", "JobState=RUNNING",
                           "Attempt=2", "NumTasks=2 CPUsPerTask=2", "WorkDir=/work", "Environment=EPOCHS=3",
                           "Tasks=0:n1[0] 1:n2[1]", "NodeList=n[1-2]", "Script=\n#!/bin/sh\necho hi\n"})
    CHECK_THAT(text, Catch::Contains(part));
  auto j = JobDetailJson(job, 0);
  CHECK(j["gid"] == 100);
  CHECK(j["script"] == "#!/bin/sh\necho hi\n");
  CHECK(j["env"]["EPOCHS"] == "3");
  CHECK(j["placement"][1]["node"] == "n2");
  CHECK(j["placement"][1]["gpu_indices"] == nlohmann::json::array({1}));
  CHECK(j["job_id"] == 42);
  CHECK_THAT(text, !Catch::Contains("TotalCPU="));  // nothing measured yet: no usage line
  // Live usage (its agents' samples) and the idle-GPU flag.
  job.set_start_time(1000);
  auto* u = job.mutable_usage();
  u->set_ranks(2);
  u->set_cpu_usec(int64_t{7200} * 1'000'000);
  u->set_max_rss_bytes(int64_t{3} << 30);
  u->set_gpu_seconds(7200);
  u->set_gpu_busy_seconds(720);
  job.set_idle_gpus_since(2800);
  job.set_idle_gpu_util(1.5);
  text = FormatJobDetail(job, 4600);
  for (const char* part : {"TotalCPU=2:00:00 CPUEff=50.0%", "MaxRSS=3G", "GPUHours=2.00", "GPUUtil=10.0%", "IdleGPUs=30:00:1.5%"})
    CHECK_THAT(text, Catch::Contains(part));
}

TEST_CASE("show job shows a job's container: image, digest, mounts, workdir, env, writable, home", "[cli][admin][container]") {
  v1::JobInfo job;
  job.set_job_id(9);
  job.mutable_spec()->add_argv("python");
  auto* c = job.mutable_spec()->mutable_container();
  c->set_image("docker://nvcr.io/nvidia/pytorch:24.05-py3");
  auto* m = c->add_mounts();
  m->set_source("/data");
  m->set_target("/data");
  m->set_read_only(true);
  c->add_env("HF_TOKEN");
  c->set_mount_home(false);
  const std::string text = FormatJobDetail(job, 0);
  CHECK_THAT(text, Catch::Contains("Container=docker://nvcr.io/nvidia/pytorch:24.05-py3 Digest=(not pulled yet) "
                                   "Mounts=/data:/data:ro Workdir=(image's) Env=HF_TOKEN Writable=no MountHome=no"));
  job.set_image_digest("sha256:" + std::string(64, 'e'));
  CHECK_THAT(FormatJobDetail(job, 0), Catch::Contains("Digest=sha256:" + std::string(64, 'e') + " Mounts="));
  auto j = JobDetailJson(job, 0);
  CHECK(j["container"]["digest"] == "sha256:" + std::string(64, 'e'));
  CHECK(j["container"]["image"] == "docker://nvcr.io/nvidia/pytorch:24.05-py3");
  CHECK(j["container"]["mounts"][0]["read_only"] == true);
  CHECK(j["container"]["mount_home"] == false);
  CHECK(j["container_image"] == "docker://nvcr.io/nvidia/pytorch:24.05-py3");
  // A bare job: Container=- and null.
  v1::JobInfo bare;
  bare.mutable_spec()->add_argv("true");
  CHECK_THAT(FormatJobDetail(bare, 0), Catch::Contains("Container=-"));
  CHECK(JobDetailJson(bare, 0)["container"].is_null());
  CHECK(JobDetailJson(bare, 0)["container_image"].is_null());
}

TEST_CASE("show job of another user's job says its command and environment are hidden", "[cli][admin]") {
  v1::JobInfo job;  // as schedd returns it to others: no argv, script or environment
  job.set_job_id(7);
  job.set_user("alice");
  job.mutable_spec()->set_name("train");
  job.mutable_spec()->set_workdir("/home/alice");
  std::string text = FormatJobDetail(job, 0);
  CHECK_THAT(text, Catch::Contains("Command=(hidden: not your job)") &&
                       Catch::Contains("Environment=(hidden: not your job)") && Catch::Contains("WorkDir=/home/alice"));
  CHECK_THAT(text, !Catch::Contains("Script="));
}

namespace {

v1::HaStatusResponse Ha() {
  v1::HaStatusResponse r;
  r.set_mode("etcd");
  r.set_leader("sched-2:7000");
  r.set_epoch(42);
  r.set_answered_by("sched-1:7000");
  r.add_etcd_endpoints("https://e1:2379");
  r.add_etcd_endpoints("https://e2:2379");
  r.set_revision(1234);
  r.set_fenced_writes(1);
  for (auto [addr, role, rev, lag] : {std::tuple{"sched-2:7000", "leader", 1234, 0}, std::tuple{"sched-1:7000", "follower", 1230, 4}}) {
    auto* m = r.add_members();
    m->set_address(addr);
    m->set_role(role);
    m->set_revision(rev);
    m->set_lag(lag);
  }
  return r;
}

}  // namespace

TEST_CASE("mladmin ha status shows the leader and a table of replicas", "[cli][admin][ha]") {
  CHECK(FormatHaStatus(Ha()) ==
        "Mode:           etcd\n"
        "Leader:         sched-2:7000\n"
        "Epoch:          42\n"
        "Answered by:    sched-1:7000\n"
        "Etcd endpoints: https://e1:2379, https://e2:2379\n"
        "Revision:       1234\n"
        "Fenced writes:  1\n"
        "\n"
        "ADDRESS       ROLE      REVISION  LAG\n"
        "sched-1:7000  follower  1230      4\n"
        "sched-2:7000  leader    1234      0\n");
  v1::HaStatusResponse single;
  single.set_mode("single");
  single.set_answered_by("unix:/run/mlsched/schedd.sock");
  const std::string text = FormatHaStatus(single);
  CHECK_THAT(text, Catch::Contains("Leader:         -\n"));
  CHECK_THAT(text, Catch::Contains("Etcd endpoints: -\n"));
  CHECK(text.find("ADDRESS") == std::string::npos);
  auto electing = Ha();
  electing.clear_leader();
  CHECK_THAT(FormatHaStatus(electing), Catch::Contains("Leader:         none (election in progress)\n"));
}

TEST_CASE("mladmin ha status --json has every field", "[cli][admin][ha]") {
  auto j = HaStatusJson(Ha());
  CHECK(j["mode"] == "etcd");
  CHECK(j["leader"] == "sched-2:7000");
  CHECK(j["epoch"] == 42);
  CHECK(j["answered_by"] == "sched-1:7000");
  CHECK(j["etcd_endpoints"] == nlohmann::json::array({"https://e1:2379", "https://e2:2379"}));
  CHECK(j["revision"] == 1234);
  CHECK(j["fenced_writes"] == 1);
  REQUIRE(j["members"].size() == 2);
  CHECK(j["members"][0] == nlohmann::json{{"address", "sched-1:7000"}, {"role", "follower"}, {"revision", 1230}, {"lag", 4}});
}

TEST_CASE("mladmin nodes escapes what a node or an operator wrote: name, reason, topology, isolation",
          "[cli][admin][security]") {
  using testing::kHostile;
  using testing::kHostileEscaped;
  auto n = Node(kHostile, v1::POOL_SPOT, kHostile);
  n.set_reason(kHostile);
  n.set_domain(kHostile);
  n.set_zone(kHostile);
  n.set_region(kHostile);
  n.set_isolation(kHostile);
  auto* g = n.mutable_capacity()->add_gpus();
  g->set_type(kHostile);
  g->set_count(1);
  const std::string table = FormatNodeTable({n, Node("gpu-01", v1::POOL_ON_DEMAND, "IDLE")});
  CHECK(testing::Inert(table));
  CHECK(std::count(table.begin(), table.end(), '\n') == 3);  // header and two nodes: no forged line
  CHECK_THAT(table, Catch::Contains(kHostileEscaped + "  spot       " + kHostileEscaped + "  1.5/64"));
  CHECK_THAT(table, Catch::Contains("  " + kHostileEscaped + "\n"));  // the reason, at the end of its line
  // Columns stay aligned: the escaped name is 44 characters wide, so "gpu-01" is padded to it.
  CHECK_THAT(table, Catch::Contains("gpu-01" + std::string(Utf8Chars(kHostileEscaped) - 6 + 2, ' ') + "on-demand"));
  const std::string json = JsonText(nlohmann::json::array({NodeJson(n)}), 2);
  CHECK(testing::Inert(json));
  CHECK(nlohmann::json::parse(json)[0]["reason"].get<std::string>().starts_with("\x1b]0;pwned"));
}

TEST_CASE("mladmin show job escapes every field and keeps only the script's newlines and tabs",
          "[cli][admin][security]") {
  using testing::kHostile;
  using testing::kHostileEscaped;
  v1::JobInfo job;
  job.set_job_id(42);
  job.set_user(kHostile);
  job.set_state(v1::PENDING);
  job.set_reason(kHostile);
  auto* s = job.mutable_spec();
  for (auto* field : {s->mutable_name(), s->mutable_account(), s->mutable_qos(), s->mutable_partition(),
                      s->mutable_workdir(), s->mutable_stdout_pattern(), s->mutable_stderr_pattern(), s->mutable_topology()})
    *field = kHostile;
  s->add_gpu_types(kHostile);
  s->set_script("#!/bin/sh\n\techo " + kHostile + "\n");
  s->mutable_env()->insert(google::protobuf::MapPair<std::string, std::string>("K" + kHostile, kHostile));
  job.add_tasks()->set_node(kHostile);
  const std::string text = FormatJobDetail(job, 0);
  CHECK(testing::Inert(text));
  for (const std::string& part : {"JobName=" + kHostileEscaped, "UserId=" + kHostileEscaped + "(0)",
                                 "Account=" + kHostileEscaped, "Reason=" + kHostileEscaped, "WorkDir=" + kHostileEscaped,
                                 "StdOut=" + kHostileEscaped, "GPUTypes=" + kHostileEscaped,
                                 "Environment=K" + kHostileEscaped + "=" + kHostileEscaped, "Tasks=0:" + kHostileEscaped,
                                 std::string("Script=\n#!/bin/sh\n\techo \\x1b]0;pwned\\x07\\x1b[2J\\x0d\n\\u009b0m\\xff训\n")})
    CHECK_THAT(text, Catch::Contains(part));
  const std::string json = JsonText(JobDetailJson(job, 0), 2);
  CHECK(testing::Inert(json));
  CHECK(nlohmann::json::parse(json)["script"].get<std::string>().starts_with("#!/bin/sh\n\techo \x1b]0;pwned"));
}

TEST_CASE("mladmin ha status escapes what a replica reports", "[cli][admin][ha][security]") {
  using testing::kHostile;
  auto r = Ha();
  r.set_mode(kHostile);
  r.set_leader(kHostile);
  r.set_answered_by(kHostile);
  r.add_etcd_endpoints(kHostile);
  r.mutable_members(0)->set_address(kHostile);
  r.mutable_members(0)->set_role(kHostile);
  const std::string text = FormatHaStatus(r);
  CHECK(testing::Inert(text));
  CHECK_THAT(text, Catch::Contains("Leader:         " + testing::kHostileEscaped + "\n"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 11);  // 7 lines, a blank one, header and 2 replicas
  CHECK(testing::Inert(JsonText(HaStatusJson(r), 2)));
}
