// The host GPU driver's files for containers (gpu_driver_files.h): `ldconfig -p` parsed with its
// limits, only the driver's 64-bit libraries taken, only root-owned files that nobody else can
// write bound, and a container holding GPUs gets them read-only at /usr/local/nvidia with its
// LD_LIBRARY_PATH and PATH pointing there (the spec agentd writes for runc, checked on disk).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "agentd/container_driver.h"
#include "agentd/gpu_driver_files.h"
#include "agentd/image_cache.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
namespace fs = std::filesystem;

namespace {

// What `ldconfig -p` prints on a host with the NVIDIA driver (535) and a 32-bit compat copy.
const char* kLdCache =
    "1234 libs found in cache `/etc/ld.so.cache'\n"
    "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
    "\tlibnvidia-ml.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so.1\n"
    "\tlibnvidia-ml.so (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ml.so\n"
    "\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1\n"
    "\tlibnvidia-mlx.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libnvidia-mlx.so.1\n"
    "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n"
    "\tlibcuda.so.1 (libc6) => /lib/i386-linux-gnu/libcuda.so.1\n"
    "\tlibcuda.so.1 (libc6,x86-64, OS ABI: Linux 3.2.0) => /usr/local/other/libcuda.so.1\n"
    "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
    "\tlibnvidia-ml.so.1 (libc6,x86-64) => relative/libnvidia-ml.so.1\n"
    "\t../libcuda.so (libc6,x86-64) => /tmp/evil.so\n"
    "not a cache line\n";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("ldconfig's cache is parsed with its limits, malformed lines are skipped") {
  auto entries = ParseLdCache(kLdCache);
  REQUIRE(entries.size() == 9);  // the header, the relative path, the "../" name and the junk are skipped
  CHECK(entries[0].name == "libz.so.1");
  CHECK(entries[0].flags == "libc6,x86-64");
  CHECK(entries[0].path == "/lib/x86_64-linux-gnu/libz.so.1");
  CHECK(entries[7].flags == "libc6,x86-64, OS ABI: Linux 3.2.0");
  const std::string long_line = "\tlibcuda.so.1 (libc6,x86-64) => /" + std::string(kMaxLdCacheLineBytes, 'a') + "\n";
  CHECK(ParseLdCache(long_line).empty());
  std::string many;
  for (size_t i = 0; i < kMaxLdCacheLines + 10; ++i) many += "\tlibx.so (libc6,x86-64) => /lib/libx.so\n";
  CHECK(ParseLdCache(many).size() == kMaxLdCacheLines);
}

TEST_CASE("only the driver's 64-bit libraries are taken, each name once, under /usr/local/nvidia/lib64") {
  auto files = SelectDriverLibraries(ParseLdCache(kLdCache));
  std::map<std::string, std::string> by_target;
  for (const auto& f : files) by_target[f.container_path] = f.host_path;
  CHECK(by_target.size() == files.size());
  CHECK(by_target == std::map<std::string, std::string>{
                         {"/usr/local/nvidia/lib64/libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"},
                         {"/usr/local/nvidia/lib64/libnvidia-ml.so", "/lib/x86_64-linux-gnu/libnvidia-ml.so"},
                         {"/usr/local/nvidia/lib64/libnvidia-ml.so.1", "/lib/x86_64-linux-gnu/libnvidia-ml.so.1"},
                         {"/usr/local/nvidia/lib64/libnvidia-ptxjitcompiler.so.1",
                          "/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"}});
  // The CUDA runtime (libcudart) belongs to the image; libnvidia-mlx is not libnvidia-ml.
}

TEST_CASE("a driver file is bound only when root owns it and nobody else can write it") {
  TempDir dir;
  const std::string lib = dir.Str("libcuda.so.535.1");
  std::ofstream(lib) << "ELF";
  fs::create_symlink(lib, dir.Str("libcuda.so.1"));
  std::string resolved;
  if (geteuid() == 0) {
    CHECK(CheckDriverFile(dir.Str("libcuda.so.1"), &resolved) == "");
    CHECK(resolved == fs::canonical(lib).string());  // bound from its target, not through the link
    chmod(lib.c_str(), 0664);
    CHECK(CheckDriverFile(lib, &resolved).find("writable by group or others") != std::string::npos);
    chmod(lib.c_str(), 0644);
    REQUIRE(chown(lib.c_str(), 65534, 65534) == 0);
    CHECK(CheckDriverFile(dir.Str("libcuda.so.1"), &resolved).find("not owned by root") != std::string::npos);
  } else {
    CHECK(CheckDriverFile(lib, &resolved).find("not owned by root") != std::string::npos);
  }
  CHECK(CheckDriverFile(dir.Str("none"), &resolved).find("cannot resolve") != std::string::npos);
  CHECK(CheckDriverFile(dir.Str(), &resolved).find("not a regular file") != std::string::npos);
}

TEST_CASE("the driver's programs are found on the system PATH only") {
  TempDir dir;
  fs::create_directories(dir.Str("bin"));
  const std::string smi = dir.Str("bin/nvidia-smi");
  std::ofstream(smi) << "#!/bin/sh\n";
  chmod(smi.c_str(), 0755);
  auto found = FindDriverPrograms("relative:" + dir.Str("bin"));
  REQUIRE(found.size() == 1);
  CHECK(found[0].host_path == smi);
  CHECK(found[0].container_path == "/usr/local/nvidia/bin/nvidia-smi");
  CHECK(FindDriverPrograms(dir.Str("none")).empty());
}

TEST_CASE("a task holding GPUs finds the driver on its LD_LIBRARY_PATH and PATH, one without does not") {
  auto image = std::make_shared<CachedImage>();
  image->env = {"PATH=/opt/conda/bin:/usr/bin"};
  LaunchRequest r;
  r.executable = "python";
  r.argv = {"python"};
  r.env = {"RANK=0"};
  r.container = std::make_shared<ContainerLaunch>();
  r.container->image = image;
  r.container->gpu_devices = {"/dev/nvidia0"};
  auto env = ContainerDriver::PlanSpec({1, 1, 0}, r, /*gpu_driver=*/true).env;
  std::set<std::string> got(env.begin(), env.end());
  CHECK(got.count("PATH=/opt/conda/bin:/usr/bin:/usr/local/nvidia/bin"));
  CHECK(got.count("LD_LIBRARY_PATH=/usr/local/nvidia/lib64"));
  // An image that lists the directory already (NVIDIA's CUDA images do) keeps its value.
  image->env.push_back("LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64");
  env = ContainerDriver::PlanSpec({1, 1, 0}, r, true).env;
  CHECK(std::count(env.begin(), env.end(), "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64") == 1);
  image->env = {"PATH=/opt/conda/bin:/usr/bin"};
  r.container->gpu_devices.clear();
  env = ContainerDriver::PlanSpec({1, 1, 0}, r, true).env;
  for (const auto& kv : env) CHECK(kv.find("/usr/local/nvidia") == std::string::npos);
}

namespace {

// A process driver that records what it was asked to run (a `runc run`) instead of running it.
class RecordingDriver final : public TaskDriver {
 public:
  explicit RecordingDriver(std::vector<LaunchRequest>* spawned) : spawned_(spawned) {}
  void UseCgroups(Cgroups*) override {}
  void Start() override {}
  bool Spawn(const TaskKey&, LaunchRequest request) override {
    spawned_->push_back(std::move(request));
    return true;
  }
  bool Terminate(const TaskKey&, std::chrono::milliseconds) override { return true; }
  bool Signal(const TaskKey&, int) override { return true; }
  void TerminateAll(std::chrono::milliseconds) override {}
  std::vector<RunningTaskInfo> Running() const override { return {}; }
  size_t Size() const override { return 0; }
  bool WaitIdle(std::chrono::milliseconds) override { return true; }
  void Stop() override {}

 private:
  std::vector<LaunchRequest>* spawned_;
};

}  // namespace

TEST_CASE("the bundle of a GPU task binds the driver's files read-only at their mount points in the image") {
  if (geteuid() != 0) {
    WARN("SKIPPED: mounting a bundle's overlay needs root");
    return;
  }
  TempDir dir;
  const std::string lib = dir.Str("host/libcuda.so.535.1");
  fs::create_directories(dir.Str("host"));
  std::ofstream(lib) << "ELF";
  auto image = std::make_shared<CachedImage>();
  image->rootfs = dir.Str("rootfs");
  fs::create_directories(image->rootfs + "/usr/bin");
  std::vector<LaunchRequest> spawned;
  std::vector<std::pair<TaskKey, ExitReport>> exits;
  ContainerTools tools;
  tools.runc = "/usr/sbin/runc";
  tools.init = "/usr/bin/tini-static";
  ContainerDriver driver(
      tools, dir.Str("containers"),
      [&](TaskDriver::StartedFn, TaskDriver::ExitedFn) { return std::make_unique<RecordingDriver>(&spawned); },
      [](const TaskKey&, pid_t) {}, [&](const TaskKey& k, pid_t, const ExitReport& r) { exits.push_back({k, r}); });
  driver.UseGpuDriverFiles({{lib, "/usr/local/nvidia/lib64/libcuda.so.1"}});
  driver.Start();
  LaunchRequest r;
  r.executable = "/usr/bin/true";
  r.argv = {"true"};
  r.env = {"PATH=/usr/bin"};
  r.uid = 65534;
  r.gid = 65534;
  r.container = std::make_shared<ContainerLaunch>();
  r.container->image = image;
  r.container->image_ref = "docker://registry.example/x:1";
  r.container->gpu_devices = {"/dev/null"};  // a character device standing in for /dev/nvidia0
  REQUIRE(driver.Spawn({3, 1, 0}, r));
  INFO((exits.empty() ? "" : exits[0].second.error));
  REQUIRE(exits.empty());
  REQUIRE(spawned.size() == 1);
  const auto bundle = dir.Str("containers/bundles/3.1.0");
  const auto config = nlohmann::json::parse(ReadAll(bundle + "/config.json"));
  bool bound = false;
  for (const auto& m : config["mounts"])
    if (m["destination"] == "/usr/local/nvidia/lib64/libcuda.so.1") {
      bound = true;
      CHECK(m["source"] == lib);
      std::set<std::string> options(m["options"].begin(), m["options"].end());
      CHECK(options.count("ro"));
      CHECK(options.count("nosuid"));
      CHECK(options.count("nodev"));
    }
  CHECK(bound);
  CHECK(fs::is_regular_file(bundle + "/rootfs/usr/local/nvidia/lib64/libcuda.so.1"));  // its mount point
  CHECK_FALSE(fs::exists(image->rootfs + "/usr/local/nvidia"));  // made in the task's overlay, not the cache
  std::set<std::string> env(config["process"]["env"].begin(), config["process"]["env"].end());
  CHECK(env.count("LD_LIBRARY_PATH=/usr/local/nvidia/lib64"));
  // A task without GPUs gets none of it.
  r.container->gpu_devices.clear();
  REQUIRE(driver.Spawn({3, 1, 1}, r));
  const auto plain = ReadAll(dir.Str("containers/bundles/3.1.1/config.json"));
  CHECK(plain.find("/usr/local/nvidia") == std::string::npos);
}
