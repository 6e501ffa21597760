// The node side of containers, without a registry or a runtime: the OCI spec agentd writes (GPU
// device passing, no capabilities, namespaces, seccomp), the environment merge, mount points made
// inside an image's root without following its symlinks out, layer sanitizing, the cache's
// adoption of what a previous agent left, opening mount sources as the user, and the plan of a
// container job. The end-to-end runs with skopeo, umoci, runc and a registry are in
// tests/e2e/container_e2e.sh.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agentd/container_bundle.h"
#include "agentd/container_driver.h"
#include "agentd/container_exec.h"
#include "agentd/container_tools.h"
#include "agentd/image_cache.h"
#include "agentd/launch_plan.h"
#include "agentd/oci_spec.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
namespace fs = std::filesystem;

namespace {

bool Has(const nlohmann::json& array, const std::string& value) {
  for (const auto& v : array)
    if (v == value) return true;
  return false;
}

}  // namespace

TEST_CASE("the OCI spec passes only the rank's GPUs and grants no privilege") {
  OciTaskSpec s;
  s.rootfs = "/var/lib/mlsched/containers/bundles/7.1.0/rootfs";
  s.args = {"/.mlsched-init", "-g", "--", "python", "train.py"};
  s.env = {"PATH=/usr/bin", "RANK=0"};
  s.cwd = "/workspace";
  s.uid = 1000;
  s.gid = 100;
  s.groups = {100, 27};
  s.umask = 077;
  s.devices = {{"/dev/nvidia3", 195, 3, 0666}, {"/dev/nvidiactl", 195, 255, 0666}};
  s.binds = {{"/proc/42/fd/9", "/data", true}};
  s.cgroups_path = "mlsched-7.1.0";
  auto j = nlohmann::json::parse(BuildOciSpec(s));
  const auto& p = j["process"];
  CHECK(p["user"]["uid"] == 1000);
  CHECK(p["user"]["gid"] == 100);
  CHECK(p["user"]["additionalGids"] == nlohmann::json({100, 27}));
  CHECK(p["user"]["umask"] == 077);
  CHECK(p["noNewPrivileges"] == true);
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) CHECK(p["capabilities"][set].empty());
  CHECK(p["args"][3] == "python");
  CHECK(p["cwd"] == "/workspace");
  // GPUs: exactly the devices given, each allowed in the device rules after a deny-all.
  const auto& linux = j["linux"];
  REQUIRE(linux["devices"].size() == 2);
  CHECK(linux["devices"][0]["path"] == "/dev/nvidia3");
  CHECK(linux["devices"][0]["major"] == 195);
  CHECK(linux["devices"][0]["minor"] == 3);
  const auto& rules = linux["resources"]["devices"];
  REQUIRE(rules.size() == 3);
  CHECK(rules[0]["allow"] == false);
  CHECK(rules[0]["access"] == "rwm");
  CHECK(rules[1]["allow"] == true);
  CHECK(rules[1]["minor"] == 3);
  CHECK(rules[1]["access"] == "rw");
  // Own PID, IPC and mount namespaces; the host's network and UTS (NCCL, Gloo).
  std::set<std::string> ns;
  for (const auto& n : linux["namespaces"]) ns.insert(n["type"].get<std::string>());
  CHECK(ns == std::set<std::string>{"pid", "ipc", "mount"});
  CHECK(linux["cgroupsPath"] == "mlsched-7.1.0");
  CHECK(j["root"]["readonly"] == false);  // agentd mounted it read-only, nosuid, nodev itself
  // The seccomp filter refuses what could widen the kernel surface.
  const auto& denied = linux["seccomp"]["syscalls"][0]["names"];
  for (const char* call : {"unshare", "setns", "mount", "bpf", "keyctl", "userfaultfd", "kexec_load", "init_module"})
    CHECK(Has(denied, call));
  CHECK(linux["seccomp"]["defaultAction"] == "SCMP_ACT_ALLOW");
  // Every bind is nosuid and nodev; read-only when asked.
  bool found = false;
  for (const auto& m : j["mounts"]) {
    if (m["destination"] != "/data") continue;
    found = true;
    CHECK(m["source"] == "/proc/42/fd/9");
    CHECK(Has(m["options"], "nosuid"));
    CHECK(Has(m["options"], "nodev"));
    CHECK(Has(m["options"], "ro"));
  }
  CHECK(found);
}

TEST_CASE("GPU device nodes come from the node with their numbers, missing ones are skipped") {
  // /dev/null stands in for a GPU node: a character device that exists everywhere.
  auto devices = GpuDevices({"/dev/null", "/dev/nvidia-none-such"});
  REQUIRE_FALSE(devices.empty());
  CHECK(devices[0].path == "/dev/null");
  CHECK(devices[0].major == 1);
  CHECK(devices[0].minor == 3);
  for (const auto& d : devices) CHECK(d.path != "/dev/nvidia-none-such");
  CHECK(GpuDevices({}).empty());  // no GPU: not even nvidiactl
}

TEST_CASE("a container's environment: the image's variables win unless named in --container-env") {
  auto image = std::make_shared<CachedImage>();
  image->env = {"PATH=/opt/conda/bin:/usr/bin", "CUDA_VERSION=12.4", "LANG=C.UTF-8"};
  image->workdir = "/workspace";
  LaunchRequest r;
  r.executable = "/work/jobs/5.1/script";
  r.argv = {"script", "--lr", "0.1"};
  r.env = {"PATH=/home/u/bin:/usr/bin", "LANG=en_US.UTF-8", "RANK=1", "MLSCHED_JOB_ID=5"};
  r.uid = 1000;
  r.gid = 1000;
  r.container = std::make_shared<ContainerLaunch>();
  r.container->image = image;
  r.container->keep_env = {"LANG"};
  r.container->gpu_devices = {};
  auto s = ContainerDriver::PlanSpec({5, 1, 1}, r);
  std::set<std::string> env(s.env.begin(), s.env.end());
  CHECK(env.count("PATH=/opt/conda/bin:/usr/bin"));  // the image's
  CHECK(env.count("LANG=en_US.UTF-8"));             // the job's: --container-env LANG
  CHECK(env.count("RANK=1"));
  CHECK(env.count("MLSCHED_JOB_ID=5"));
  CHECK(env.count("CUDA_VERSION=12.4"));
  CHECK(s.env.size() == 5);
  CHECK(s.args == std::vector<std::string>{"/work/jobs/5.1/script", "--lr", "0.1"});
  CHECK(s.cwd == "/workspace");
  CHECK(s.cgroups_path == "mlsched-5.1.1");
  r.container->workdir = "/data";
  CHECK(ContainerDriver::PlanSpec({5, 1, 1}, r).cwd == "/data");
}

TEST_CASE("mount points are made inside the image's root: its symlinks never lead out") {
  TempDir dir;
  const std::string root = dir.Str("rootfs"), outside = dir.Str("outside");
  fs::create_directories(root + "/etc");
  fs::create_directories(outside);
  fs::create_directory_symlink("/", root + "/abs");                   // absolute: the image's "/"
  fs::create_directory_symlink("../../../../../../..", root + "/up");  // climbs: stays at the image's "/"
  fs::create_directory_symlink(outside, root + "/out");               // an absolute host path
  int fd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(MakeInRoot(fd, {"/abs/etc/made-by-abs", true}) == "");
  CHECK(fs::is_directory(root + "/etc/made-by-abs"));
  CHECK(MakeInRoot(fd, {"/up/etc/made-by-up", true}) == "");
  CHECK(fs::is_directory(root + "/etc/made-by-up"));
  // `out` names a host directory: inside the root that path does not exist, so nothing is made,
  // and never on the host.
  CHECK(MakeInRoot(fd, {"/out/escaped", true}).find("No such file or directory") != std::string::npos);
  CHECK_FALSE(fs::exists(outside + "/escaped"));
  CHECK(MakeInRoot(fd, {"/a/b/file", false}) == "");
  CHECK(fs::is_regular_file(root + "/a/b/file"));
  CHECK(MakeInRoot(fd, {"/a/b/file", false}) == "");  // already there
  CHECK(MakeInRoot(fd, {"/a/b", false}) != "");       // a directory where a file must go
  CHECK(MakeInRoot(fd, {"relative", true}) != "");
  CHECK(MakeInRoot(fd, {"/a/../etc", true}) != "");
  close(fd);
}

TEST_CASE("a layer's setuid bits are cleared and its device nodes removed") {
  TempDir dir;
  const std::string root = dir.Str("rootfs");
  fs::create_directories(root + "/bin");
  { std::ofstream(root + "/bin/su") << "x"; }
  { std::ofstream(root + "/bin/plain") << "x"; }
  chmod((root + "/bin/su").c_str(), 06755);
  chmod((root + "/bin/plain").c_str(), 0755);
  fs::create_symlink("su", root + "/bin/link");
  const bool root_user = geteuid() == 0;
  if (root_user) REQUIRE(mknod((root + "/bin/mem").c_str(), S_IFCHR | 0666, makedev(1, 1)) == 0);
  int devices = -1, setid = -1;
  CHECK(SanitizeRootfs(root, &devices, &setid) == "");
  struct stat st{};
  REQUIRE(stat((root + "/bin/su").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);
  CHECK(setid == 1);
  CHECK(fs::is_symlink(root + "/bin/link"));
  if (root_user) {
    CHECK(devices == 1);
    CHECK_FALSE(fs::exists(root + "/bin/mem"));
  }
}

TEST_CASE("the image cache adopts complete images and removes what an interrupted run left") {
  TempDir dir;
  const std::string cache = dir.Str("cache");
  const std::string good = std::string(64, 'a'), bad = std::string(64, 'b');
  fs::create_directories(cache + "/images/" + good + "/rootfs/bin");
  { std::ofstream(cache + "/images/" + good + "/config.json") << R"({"process":{"args":["/bin/sh"],"env":["A=1"],"cwd":"/w"}})"; }
  { std::ofstream(cache + "/images/" + good + "/rootfs/bin/x") << std::string(10000, 'x'); }
  { std::ofstream(cache + "/images/" + good + "/mlsched-source") << "private docker://registry.example/team/x\n"; }
  fs::create_directories(cache + "/images/" + bad + "/rootfs");  // no config.json: incomplete
  // Complete, but with no record of who may use it (an older agentd's): removed, pulled again later.
  const std::string unknown = std::string(64, 'c');
  fs::create_directories(cache + "/images/" + unknown + "/rootfs");
  { std::ofstream(cache + "/images/" + unknown + "/config.json") << R"({"process":{"args":["/bin/sh"],"cwd":"/"}})"; }
  fs::create_directories(cache + "/images/not-a-digest");
  fs::create_directories(cache + "/tmp/half-pulled");
  ImageCache c({cache, 0, "", std::chrono::seconds(10)}, ContainerTools{});
  REQUIRE(c.Init() == "");
  CHECK(c.Images() == 1);
  CHECK(c.UsedBytes() >= 10000);
  CHECK_FALSE(fs::exists(cache + "/images/" + bad));
  CHECK_FALSE(fs::exists(cache + "/images/" + unknown));
  CHECK_FALSE(fs::exists(cache + "/images/not-a-digest"));
  CHECK_FALSE(fs::exists(cache + "/tmp/half-pulled"));
  CHECK((fs::status(cache).permissions() & fs::perms::others_all) == fs::perms::others_exec);  // searchable only
  CHECK((fs::status(cache + "/images").permissions() & fs::perms::others_all) == fs::perms::none);
  // An image on the node's file system is read as the job's user: without one it is refused.
  PullReport report;
  bool transient = true;
  auto got = c.Acquire("oci:/shared/images/x", [](const std::string&) {}, &report, &transient);
  CHECK_FALSE(got);
  CHECK(got.error.find("read as the job's user") != std::string::npos);
  CHECK_FALSE(transient);
}

TEST_CASE("what an image's author or a job's user controls has a limit: config size, staged nesting") {
  TempDir dir;
  const std::string config = dir.Str("config.json");
  {
    std::ofstream out(config);
    out << R"({"process":{"args":["/bin/sh"],"env":[")" << std::string(kMaxImageConfigBytes, 'x') << R"("],"cwd":"/"}})";
  }
  CachedImage image;
  CHECK(ReadUmociImageConfig(config, &image).find("larger than") != std::string::npos);
  if (geteuid() != 0) {
    WARN("SKIPPED: taking over a staged copy needs root");
    return;
  }
  // A job's process could nest directories in its staging directory while skopeo copies: agentd
  // walks it recursively as root, so the depth is bounded instead of the stack.
  std::string deep = dir.Str("stage");
  for (int i = 0; i <= kMaxStagedDepth + 2; ++i) deep += "/d";
  fs::create_directories(deep);
  int fd = open(dir.Str("stage").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(TakeOverTree(fd, dir.Str("stage")).find("nested more than") != std::string::npos);
  close(fd);
  fs::create_directories(dir.Str("ok/blobs/sha256"));
  { std::ofstream(dir.Str("ok/blobs/sha256/x")) << "blob"; }
  fs::create_symlink("/etc/shadow", dir.Str("ok/blobs/sha256/evil"));
  fd = open(dir.Str("ok").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(TakeOverTree(fd, dir.Str("ok")).find("not a regular file or directory") != std::string::npos);
  close(fd);
}

TEST_CASE("a helper's reason is the last line of its output, without containers/image's log dressing") {
  ToolResult r;
  r.exit_code = 1;
  r.output = "Getting image source signatures\n"
             "time=\"2026-11-27T23:52:47Z\" level=fatal msg=\"initializing source \\\"docker://x\\\": manifest unknown\"\n";
  CHECK(r.Reason() == "initializing source \"docker://x\": manifest unknown");
  auto run = RunTool({"/bin/sh", "-c", "echo one; echo two >&2; exit 3"}, {}, std::chrono::seconds(5));
  CHECK(run.exit_code == 3);
  CHECK(run.Reason() == "two");
  auto slow = RunTool({"/bin/sleep", "5"}, {}, std::chrono::milliseconds(200));
  CHECK(slow.timed_out);
  CHECK_FALSE(RunTool({"sh"}, {}, std::chrono::seconds(1)).error.empty());  // a relative helper path
}

TEST_CASE("mount sources are opened as the user: root's own view never decides") {
  if (geteuid() != 0) {
    WARN("SKIPPED: needs root to switch to uid 65534");
    return;
  }
  TempDir dir;
  const std::string secret = dir.Str("secret"), open_dir = dir.Str("open");
  fs::create_directories(secret);
  fs::create_directories(open_dir);
  chmod(dir.Str().c_str(), 0755);
  chmod(secret.c_str(), 0700);
  chmod(open_dir.c_str(), 0755);
  auto ok = OpenAsUser({open_dir}, 65534, 65534, {});
  REQUIRE(ok);
  REQUIRE((*ok.value)->fds.size() == 1);
  CHECK((*ok.value)->directory[0]);
  auto denied = OpenAsUser({secret}, 65534, 65534, {});
  CHECK_FALSE(denied);
  CHECK(denied.error == secret + ": Permission denied");
  auto fifo = dir.Str("fifo");
  REQUIRE(mkfifo(fifo.c_str(), 0666) == 0);
  auto refused = OpenAsUser({fifo}, 65534, 65534, {});  // never blocks, never accepted
  CHECK_FALSE(refused);
  CHECK(refused.error.find("not a directory or regular file") != std::string::npos);
}

TEST_CASE("a container job's plan: attempt directory, home, the user's mounts, /dev/shm and the rank's GPUs") {
  TempDir dir;
  v1::Prepare p;
  p.set_job_id(9);
  p.set_attempt(2);
  p.set_user("root");
  p.set_uid(getuid());
  p.set_gid(getgid());
  p.set_world_size(2);
  p.set_local_world_size(2);
  p.set_master_addr("127.0.0.1");
  auto* spec = p.mutable_spec();
  spec->add_argv("python");
  spec->set_workdir(dir.Str());
  auto* c = spec->mutable_container();
  c->set_image("docker://registry.example:5000/team/train:1");
  auto* m = c->add_mounts();
  m->set_source("/datasets/mnist");
  m->set_target("/data");
  m->set_read_only(true);
  for (int r = 0; r < 2; ++r) {
    auto* t = p.add_tasks();
    t->set_rank(r);
    t->set_local_rank(r);
    t->add_gpu_indices(r == 0 ? 2 : 3);
  }
  PlanContext ctx{"n1", dir.Str("work"), false, 4, 0, {}};
  for (int i = 0; i < 4; ++i) ctx.gpu_devices.push_back("/dev/nvidia" + std::to_string(i));
  ctx.agent_uid = geteuid();
  ctx.allow_root_jobs = true;  // this test's user may be root
  auto refused = PlanAttempt(p, ctx);
  CHECK_FALSE(refused);
  CHECK(refused.error.find("runs no containers") != std::string::npos);
  ctx.containers = true;
  auto plan = PlanAttempt(p, ctx);
  INFO(plan.error);
  REQUIRE(plan);
  REQUIRE(plan.value->ranks.size() == 2);
  const auto& cl = *plan.value->ranks[1].request.container;
  CHECK(cl.image_ref == "docker://registry.example:5000/team/train:1");
  CHECK(cl.gpu_devices == std::vector<std::string>{"/dev/nvidia3"});
  CHECK(cl.shm_dir == plan.value->dir + ".shm");
  REQUIRE(cl.binds.size() >= 2);
  CHECK(cl.binds[0].source == ctx.work_dir + "/jobs");  // the stop-reason files, read-only
  CHECK(cl.binds[0].read_only);
  CHECK(cl.binds[1].source == plan.value->dir);  // the attempt directory, agentd's own path
  CHECK_FALSE(cl.binds[1].user_path);
  const auto& data = cl.binds.back();
  CHECK(data.source == "/datasets/mnist");
  CHECK(data.target == "/data");
  CHECK(data.read_only);
  CHECK(data.user_path);  // opened as the user at launch
  // The other ranks' GPUs stay denied in the task's cgroup as for bare tasks.
  CHECK(plan.value->ranks[1].request.limits.deny_devices.size() == 3);
  // A message with a mount schedd would never have accepted is refused here too.
  m->set_target("/proc/self");
  auto bad = PlanAttempt(p, ctx);
  CHECK_FALSE(bad);
  CHECK(bad.error.find("container mount") != std::string::npos);
}

TEST_CASE("a session's process.json is the container's process with the session's command and variables", "[container][exec]") {
  using mlsched::agent::ExecProcessJson;
  const std::string config = R"({"ociVersion":"1.0.2","process":{"user":{"uid":65534,"gid":65534,"additionalGids":[65534]},
    "args":["/usr/local/bin/tini","-g","--","/bin/sh","-c","sleep 300"],"env":["PATH=/bin","RANK=0","TERM=dumb"],
    "cwd":"/work","noNewPrivileges":true,"capabilities":{"bounding":[]},"rlimits":[{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}]},
    "root":{"path":"rootfs"}})";
  auto p = ExecProcessJson(config, {"sh", "-i"}, {"RANK=3", "TERM=xterm-256color", "WORLD_SIZE=4"}, true, 30, 100);
  REQUIRE(p.value);
  const auto j = nlohmann::json::parse(*p.value);
  CHECK(j["args"] == nlohmann::json({"sh", "-i"}));  // no tini: the exec is not PID 1
  CHECK(j["env"] == nlohmann::json({"PATH=/bin", "RANK=3", "TERM=xterm-256color", "WORLD_SIZE=4"}));
  CHECK(j["terminal"] == true);
  CHECK(j["consoleSize"]["height"] == 30);
  CHECK(j["consoleSize"]["width"] == 100);
  // The container's identity and limits are kept as they are.
  CHECK(j["user"]["uid"] == 65534);
  CHECK(j["noNewPrivileges"] == true);
  CHECK(j["capabilities"]["bounding"].empty());
  CHECK(j["rlimits"][0]["hard"] == 1024);
  CHECK(j["cwd"] == "/work");
  auto pipes = ExecProcessJson(config, {"true"}, {}, false, 0, 0);
  REQUIRE(pipes.value);
  CHECK(nlohmann::json::parse(*pipes.value)["terminal"] == false);
  CHECK_FALSE(nlohmann::json::parse(*pipes.value).contains("consoleSize"));
  CHECK_FALSE(ExecProcessJson(R"({"root":{}})", {"true"}, {}, false, 0, 0).value);
  CHECK_FALSE(ExecProcessJson("not json", {"true"}, {}, false, 0, 0).value);
}
