// Container jobs at schedd (issue 31): the container request is checked as mlsub checks it (an
// API client may send anything), and such jobs go only to nodes whose agent has a runtime.
#include <catch2/catch.hpp>

#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;

namespace {

v1::JobSpec ContainerSpec(int cpus = 1) {
  v1::JobSpec s = Spec(1, cpus);
  s.mutable_container()->set_image("docker://docker.io/library/busybox:latest");
  return s;
}

v1::RegisterNode WithRuntime(v1::RegisterNode r) {
  r.set_container_runtime("runc 1.1.5");
  return r;
}

}  // namespace

TEST_CASE("a container request an API client sends is checked as mlsub checks it, and nothing is stored",
          "[server][container]") {
  NodesWorld w(0);
  w.ctl->OnRegister(WithRuntime(NodeReg("c1", 4)), w.now);
  struct Case {
    const char* what;
    std::function<void(v1::ContainerSpec&)> edit;
    const char* error;
  };
  const Case cases[] = {
      {"an image not in canonical form", [](v1::ContainerSpec& c) { c.set_image("busybox"); },
       "is not in canonical form; send 'docker://docker.io/library/busybox:latest'"},
      {"another transport", [](v1::ContainerSpec& c) { c.set_image("dir:/tmp/rootfs"); }, "unknown image transport"},
      {"a relative archive", [](v1::ContainerSpec& c) { c.set_image("oci-archive:img.tar"); }, "must be an absolute path"},
      {"a mount onto /proc", [](v1::ContainerSpec& c) {
         auto* m = c.add_mounts();
         m->set_source("/data");
         m->set_target("/proc/sys");
       }, "is under /proc"},
      {"a mount source with ..", [](v1::ContainerSpec& c) {
         auto* m = c.add_mounts();
         m->set_source("/data/../etc");
         m->set_target("/etc2");
       }, "clean path"},
      {"a target twice", [](v1::ContainerSpec& c) {
         for (int i = 0; i < 2; ++i) {
           auto* m = c.add_mounts();
           m->set_source("/data" + std::to_string(i));
           m->set_target("/data");
         }
       }, "given twice"},
      {"65 mounts", [](v1::ContainerSpec& c) {
         for (int i = 0; i < 65; ++i) {
           auto* m = c.add_mounts();
           m->set_source("/d" + std::to_string(i));
           m->set_target("/d" + std::to_string(i));
         }
       }, "65 mounts; the limit is 64"},
      {"a mount path of invalid UTF-8", [](v1::ContainerSpec& c) {
         auto* m = c.add_mounts();
         m->set_source("/data/\xff\xfe");
         m->set_target("/data");
       }, "a container mount holds a control character or invalid UTF-8"},
      {"a relative workdir", [](v1::ContainerSpec& c) { c.set_workdir("work"); }, "container workdir 'work' must be an absolute path"},
      {"a bad environment name", [](v1::ContainerSpec& c) { c.add_env("A=B"); }, "container env: "},
      {"300 environment names", [](v1::ContainerSpec& c) { for (int i = 0; i < 300; ++i) c.add_env("V" + std::to_string(i)); },
       "300 environment names; the limit is 256"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    v1::JobSpec spec = ContainerSpec();
    c.edit(*spec.mutable_container());
    int64_t id = 0;
    Status st = w.ctl->Submit(w.alice, spec, w.now, &id);
    CHECK(st.code == Status::kInvalidArgument);
    CHECK_THAT(st.message, Catch::Contains(c.error));
  }
  CHECK(ListAll(*w.ctl, Root(), v1::ListJobsRequest{}).empty());
}

TEST_CASE("container jobs run only on nodes with a runtime, none at all refuses them at submit", "[server][container]") {
  NodesWorld w(2, 4);  // n1, n2: no runtime
  int64_t id = 0;
  Status st = w.ctl->Submit(w.alice, ContainerSpec(), w.now, &id);
  CHECK(st.code == Status::kInvalidArgument);
  CHECK_THAT(st.message, Catch::Contains("no node runs container jobs"));

  w.ctl->OnRegister(WithRuntime(NodeReg("c1", 4)), w.now);
  const int64_t a = w.Submit(ContainerSpec(4), w.alice);
  const int64_t bare = w.Submit(Spec(1, 4), w.alice);
  const int64_t b = w.Submit(ContainerSpec(4), w.alice);  // last: no backfill in the default policy
  w.ctl->RunCycle(w.now);
  CHECK(w.Job(a).state() == v1::RUNNING);
  REQUIRE(w.Job(a).tasks_size() == 1);
  CHECK(w.Job(a).tasks(0).node() == "c1");
  // c1 is full: the second container job waits although n1 and n2 are idle.
  CHECK(w.Job(b).state() == v1::PENDING);
  INFO(w.Job(bare).reason() << ": " << w.Job(bare).reason_detail());
  CHECK(w.Job(bare).state() == v1::RUNNING);
  REQUIRE(w.Job(bare).tasks_size() == 1);
  CHECK(w.Job(bare).tasks(0).node() != "c1");
  CHECK(w.sink.Of("n1", v1::SchedulerMessage::kPrepare).size() + w.sink.Of("n2", v1::SchedulerMessage::kPrepare).size() == 1);

  // The runtime is remembered across a restart of schedd (the node's stored registration).
  w.ctl.reset();
  w.Start(mlsched::core::PolicySet{});
  w.ctl->Recover(w.now);
  v1::NodeInfo c1;
  bool found = false;
  for (const auto& n : w.ctl->Nodes())
    if (n.name() == "c1") c1 = n, found = true;
  REQUIRE(found);
  CHECK(c1.container_runtime() == "runc 1.1.5");
}

TEST_CASE("the digest a node pulled is shown with the job and kept across a restart of schedd and after its end",
          "[server][container]") {
  NodesWorld w(0);
  w.ctl->OnRegister(WithRuntime(NodeReg("c1", 4)), w.now);
  const int64_t id = w.Submit(ContainerSpec(), w.alice);
  w.ctl->RunCycle(w.now);
  REQUIRE(w.Job(id).state() == v1::RUNNING);
  CHECK(w.Job(id).image_digest().empty());  // not pulled yet
  const std::string digest = "sha256:ef47386b595ec1fa9c98a3ef16e85a4b0db4ebe1fccb16b67594feeb219ffe89";
  v1::AgentMessage ok = PrepareOk(id, 1);
  ok.mutable_prepare_result()->set_image_digest(digest);
  w.ctl->OnAgentMessage("c1", ok, w.now);
  CHECK(w.Job(id).image_digest() == digest);
  w.ctl->OnAgentMessage("c1", Started(id, 1, 0), w.now);

  w.ctl.reset();  // schedd restarts: the digest was stored with the job at the commit
  w.Start(mlsched::core::PolicySet{});
  w.ctl->Recover(w.now + 5);
  CHECK(w.Job(id).image_digest() == digest);
  w.ctl->OnAgentMessage("c1", Exited(id, 1, 0, 0), w.now + 10);
  CHECK(w.Job(id).state() == v1::COMPLETED);
  w.ctl.reset();  // and an ended job, read back from the store
  w.Start(mlsched::core::PolicySet{});
  w.ctl->Recover(w.now + 20);
  CHECK(w.Job(id).image_digest() == digest);
}
