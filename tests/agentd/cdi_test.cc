// CDI specs (cdi_spec.h, cdi_plan.h): nvidia-ctk's YAML and its JSON form read into the same
// spec; syntax errors name FILE:LINE:COL, field errors the field's path; every limit holds (an
// alias bomb, a deep document, a long list); spec directories and files a user could write are
// refused; a rank gets its own GPU's device (never "all", never another rank's), the common
// nodes, read-only mounts of root's files only, the environment, the toolkit hooks' symlinks and
// SONAME links made in its root without leaving it, and LD_LIBRARY_PATH for update-ldcache.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "agentd/cdi_plan.h"
#include "agentd/cdi_spec.h"
#include "agentd/container_bundle.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
namespace fs = std::filesystem;

namespace {

// What `nvidia-ctk cdi generate` writes for a two-GPU node (trimmed), with DRIVER standing for
// the directory of the test's driver files.
std::string NvidiaYaml(const std::string& driver) {
  return R"(---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      type: c
      major: 1
      minor: 3
- name: "1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
      type: c
      major: 1
      minor: 5
      fileMode: 0640
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      major: 1
      minor: 3
    - path: /dev/nvidia1
      major: 1
      minor: 5
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
    major: 1
    minor: 7
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, create-symlinks, --link, libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so, --link, '../nvidia0::/dev/char/195:0']
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder=/usr/lib/x86_64-linux-gnu]
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, enable-cuda-compat, --host-driver-version=555.1]
  mounts:
  - hostPath: )" + driver + R"(/libcuda.so.555.1
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.555.1
    options: [ro, nosuid, nodev, bind]
  - hostPath: )" + driver + R"(/bin
    containerPath: /usr/local/driver-bin
    options: [ro, nosuid, nodev, bind]
)";
}

// A root-owned driver directory: libcuda.so.555.1 (and its SONAME link, as the host's ldconfig
// made it) and a bin/ directory.
struct Driver {
  TempDir dir;
  Driver() {
    std::ofstream(dir.Str("libcuda.so.555.1")) << "ELF";
    fs::create_symlink("libcuda.so.555.1", dir.Str("libcuda.so.1"));
    fs::create_directories(dir.Str("bin"));
    chmod(dir.Str("libcuda.so.555.1").c_str(), 0644);
    chmod(dir.Str("bin").c_str(), 0755);
  }
  std::vector<LdCacheEntry> LdCache() {
    return {{"libcuda.so.1", "libc6,x86-64", dir.Str("libcuda.so.1")}, {"libz.so.1", "libc6,x86-64", "/nonexistent/libz.so.1"}};
  }
};

CdiCatalog Catalog(const std::string& yaml, const std::vector<LdCacheEntry>& ld) {
  auto spec = ParseCdiSpec(yaml, "/etc/cdi/nvidia.yaml");
  REQUIRE(spec.error == "");
  std::vector<CdiSpec> specs{*spec.value};
  return MakeCdiCatalog(std::move(specs), ld);
}

}  // namespace

TEST_CASE("CDI: nvidia-ctk's YAML spec is read whole") {
  auto spec = ParseCdiSpec(NvidiaYaml("/drv"), "/etc/cdi/nvidia.yaml");
  REQUIRE(spec.error == "");
  const CdiSpec& s = *spec.value;
  CHECK(s.kind == "nvidia.com/gpu");
  CHECK(s.cdi_version == "0.5.0");
  REQUIRE(s.devices.size() == 3);
  CHECK(s.devices[0].name == "0");  // quoted: a string, not the number 0
  CHECK(s.devices[1].edits.device_nodes[0].file_mode == 0640);  // YAML 1.1 octal
  CHECK(s.devices[1].edits.device_nodes[0].minor == 5);
  CHECK(s.devices[2].edits.device_nodes[0].type == "");
  CHECK(s.edits.env == std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"});
  REQUIRE(s.edits.hooks.size() == 3);
  CHECK(s.edits.hooks[0].args[4] == "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so");
  REQUIRE(s.edits.mounts.size() == 2);
  CHECK(s.edits.mounts[0].options == std::vector<std::string>{"ro", "nosuid", "nodev", "bind"});
}

TEST_CASE("CDI: a JSON spec reads the same as its YAML") {
  const std::string text = R"({"cdiVersion":"0.6.0","kind":"nvidia.com/gpu",
    "devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0","major":195,"minor":0}]}}],
    "containerEdits":{"env":["A=1"],"mounts":[{"hostPath":"/usr/bin/nvidia-smi","containerPath":"/usr/bin/nvidia-smi"}]}})";
  auto j = ParseCdiSpec(text, "/var/run/cdi/nvidia.json");
  REQUIRE(j.error == "");
  CHECK(j.value->devices[0].edits.device_nodes[0].major == 195);
  CHECK(j.value->edits.mounts[0].container_path == "/usr/bin/nvidia-smi");
  // The same document as YAML (JSON is YAML's flow style).
  auto y = ParseCdiSpec(text, "/var/run/cdi/nvidia.yaml");
  REQUIRE(y.error == "");
  CHECK(y.value->devices[0].edits.device_nodes[0].major == 195);
  CHECK(y.value->edits.env == j.value->edits.env);
}

TEST_CASE("CDI: bad specs are refused with the file, line or field named") {
  auto err = [](const std::string& text, const std::string& file = "/etc/cdi/x.yaml") {
    auto s = ParseCdiSpec(text, file);
    CHECK(!s);
    return s.error;
  };
  CHECK(err("kind: nvidia.com/gpu\ndevices:\n  - name: [unclosed\n") .rfind("/etc/cdi/x.yaml:4:", 0) == 0);
  CHECK(err("devices: []\n") == "/etc/cdi/x.yaml: kind: missing");
  CHECK(err("kind: gpu\ndevices: []\n").find("is not VENDOR/CLASS") != std::string::npos);
  CHECK(err("kind: a/b\ndevices:\n- containerEdits: {}\n") == "/etc/cdi/x.yaml: devices[0].name: missing");
  CHECK(err("kind: a/b\ndevices:\n- name: x\n  containerEdits:\n    mounts:\n    - {hostPath: lib, containerPath: /l}\n") ==
        "/etc/cdi/x.yaml: devices[0].containerEdits.mounts[0].hostPath: 'lib' is not an absolute path");
  CHECK(err("kind: a/b\ndevices: []\ncontainerEdits:\n  env: [NOEQUALS]\n").find("env[0]: 'NOEQUALS' is not NAME=VALUE") !=
        std::string::npos);
  CHECK(err("kind: a/b\ndevices: []\ncontainerEdits:\n  deviceNodes:\n  - {path: /dev/x, major: -1}\n")
            .find("major: not an integer") != std::string::npos);
  CHECK(err("{\"kind\": 5, \"devices\": []}", "/etc/cdi/x.json") == "/etc/cdi/x.json: kind: not a string");
  CHECK(err("{\"kind\": ", "/etc/cdi/x.json").find("parse error") != std::string::npos);
}

TEST_CASE("CDI: every limit holds: an alias bomb, deep nesting, a long list, a long string, a large file") {
  // "Billion laughs": nine levels of nine aliases each would expand to 387 M strings.
  std::string bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n";
  for (char c = 'b'; c <= 'i'; ++c)
    bomb += std::string(1, c) + ": &" + c + " [*" + char(c - 1) + ",*" + char(c - 1) + ",*" + char(c - 1) + ",*" +
            char(c - 1) + ",*" + char(c - 1) + ",*" + char(c - 1) + ",*" + char(c - 1) + ",*" + char(c - 1) + ",*" +
            char(c - 1) + "]\n";
  auto s = ParseCdiSpec(bomb + "kind: a/b\ndevices: []\n", "/etc/cdi/bomb.yaml");
  CHECK(s.error.find("YAML nodes") != std::string::npos);
  std::string deep = "kind: a/b\ndevices: []\nx: " + std::string(40, '[') + std::string(40, ']') + "\n";
  CHECK(ParseCdiSpec(deep, "/etc/cdi/d.yaml").error.find("nested deeper") != std::string::npos);
  CHECK(ParseCdiSpec("{\"kind\":\"a/b\",\"devices\":[],\"x\":" + std::string(40, '[') + std::string(40, ']') + "}",
                     "/etc/cdi/d.json")
            .error.find("nested deeper") != std::string::npos);
  std::string env = "kind: a/b\ndevices: []\ncontainerEdits:\n  env:\n";
  for (size_t i = 0; i <= kMaxCdiListEntries; ++i) env += "  - A=1\n";
  CHECK(ParseCdiSpec(env, "/etc/cdi/l.yaml").error.find("more than 4096 entries") != std::string::npos);
  CHECK(ParseCdiSpec("kind: a/" + std::string(kMaxCdiStringBytes, 'b') + "\ndevices: []\n", "/etc/cdi/s.yaml")
            .error.find("longer than") != std::string::npos);
  CHECK(ParseCdiSpec(std::string(kMaxCdiSpecBytes + 1, ' '), "/etc/cdi/big.yaml").error.find("larger than") !=
        std::string::npos);
}

TEST_CASE("CDI: spec directories and files a user could write are not read") {
  TempDir a, b;
  std::ofstream(a.Str("nvidia.yaml")) << NvidiaYaml("/drv");
  std::ofstream(a.Str("broken.yaml")) << "kind: [\n";
  std::ofstream(a.Str("notes.txt")) << "ignored";
  chmod(a.Str().c_str(), 0755);
  chmod(a.Str("nvidia.yaml").c_str(), 0644);
  chmod(a.Str("broken.yaml").c_str(), 0644);
  std::vector<std::string> errors;
  auto specs = LoadCdiSpecs({a.Str(), a.Str("missing")}, &errors);
  if (geteuid() != 0) {
    CHECK(specs.empty());  // the test's files are not root's
    return;
  }
  REQUIRE(specs.size() == 1);
  CHECK(specs[0].file == a.Str("nvidia.yaml"));
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].rfind(a.Str("broken.yaml") + ":", 0) == 0);
  // A file a user owns, one group-writable, a symlink to a spec, a directory others can write.
  std::ofstream(b.Str("user.yaml")) << NvidiaYaml("/drv");
  std::ofstream(b.Str("group.json")) << "{}";
  REQUIRE(chown(b.Str("user.yaml").c_str(), 65534, 65534) == 0);
  chmod(b.Str("group.json").c_str(), 0664);
  fs::create_symlink(a.Str("nvidia.yaml"), b.Str("link.yaml"));
  chmod(b.Str().c_str(), 0755);
  errors.clear();
  CHECK(LoadCdiSpecs({b.Str()}, &errors).empty());
  REQUIRE(errors.size() == 3);
  CHECK(errors[0].find("group.json: writable by group or others") != std::string::npos);
  CHECK(errors[1].find("link.yaml") != std::string::npos);
  CHECK(errors[2].find("user.yaml: not owned by root") != std::string::npos);
  chmod(a.Str().c_str(), 0777);
  errors.clear();
  CHECK(LoadCdiSpecs({a.Str()}, &errors).empty());
  CHECK(errors.at(0).find("writable by group or others; its CDI specs are not read") != std::string::npos);
}

TEST_CASE("CDI: a rank gets its own GPU's device, the common edits and the hooks' effects") {
  if (geteuid() != 0) return;  // the driver files must be root's
  Driver drv;
  CdiCatalog cat = Catalog(NvidiaYaml(drv.dir.Str()), drv.LdCache());
  auto plan = PlanCdi(cat, {"/dev/nvidia1"}, {"/dev/nvidia0"});
  REQUIRE(plan.error == "");
  const CdiPlan& p = *plan.value;
  std::set<std::string> devices;
  for (const auto& d : p.devices) devices.insert(d.path + "=" + std::to_string(d.major) + ":" + std::to_string(d.minor));
  CHECK(devices == std::set<std::string>{"/dev/nvidiactl=1:7", "/dev/nvidia1=1:5"});  // device "1", not "all"
  REQUIRE(p.mounts.size() == 2);
  CHECK(p.mounts[0].host_path == fs::canonical(drv.dir.Str("libcuda.so.555.1")).string());
  CHECK(p.mount_is_dir == std::vector<bool>{false, true});
  CHECK(p.env == std::vector<std::string>{"NVIDIA_VISIBLE_DEVICES=void"});
  CHECK(p.library_dirs == std::vector<std::string>{"/usr/lib/x86_64-linux-gnu"});
  std::set<std::string> links;
  for (const auto& s : p.symlinks) links.insert(s.link + "->" + s.target);
  // create-symlinks' link, and the SONAME link ldconfig would make for the mounted library; the
  // link under /dev is left out (runc's /dev hides it).
  CHECK(links == std::set<std::string>{"/usr/lib/x86_64-linux-gnu/libcuda.so->libcuda.so.1",
                                       "/usr/lib/x86_64-linux-gnu/libcuda.so.1->libcuda.so.555.1"});
  auto unsupported = UnsupportedHooks(cat);
  REQUIRE(unsupported.size() == 1);
  CHECK(unsupported[0].find("enable-cuda-compat") != std::string::npos);

  // Applied to the task's spec: GPUs replaced, mounts read-only, the image's LD_LIBRARY_PATH kept.
  OciTaskSpec spec;
  spec.env = {"LD_LIBRARY_PATH=/opt/lib", "NVIDIA_VISIBLE_DEVICES=all", "RANK=0"};
  spec.devices = {{"/dev/nvidia0", 195, 0, 0666}};
  std::vector<MountPoint> points;
  ApplyCdiPlan(p, &spec, &points);
  CHECK(spec.devices.size() == 2);
  CHECK(spec.env == std::vector<std::string>{"LD_LIBRARY_PATH=/opt/lib:/usr/lib/x86_64-linux-gnu", "RANK=0",
                                             "NVIDIA_VISIBLE_DEVICES=void"});
  REQUIRE(spec.binds.size() == 2);
  CHECK(spec.binds[0].read_only);
  CHECK(spec.binds[1].read_only);
  REQUIRE(points.size() == 4);
  CHECK(points[1].directory);
  CHECK(points[2].symlink_target == "libcuda.so.1");
}

TEST_CASE("CDI attacks: user files, kernel paths, block devices, other ranks' GPUs are refused") {
  if (geteuid() != 0) return;
  Driver drv;
  const std::string yaml = NvidiaYaml(drv.dir.Str());
  auto plan_with = [&](const std::string& text, std::vector<std::string> gpus = {"/dev/nvidia0"},
                       std::vector<std::string> denied = {"/dev/nvidia1"}) {
    return PlanCdi(Catalog(text, drv.LdCache()), gpus, denied).error;
  };
  // The library made a user's file, or writable by its group: nothing is planned.
  REQUIRE(chown(drv.dir.Str("libcuda.so.555.1").c_str(), 65534, 65534) == 0);
  CHECK(plan_with(yaml).find("not owned by root") != std::string::npos);
  REQUIRE(chown(drv.dir.Str("libcuda.so.555.1").c_str(), 0, 0) == 0);
  chmod(drv.dir.Str("bin").c_str(), 0775);
  CHECK(plan_with(yaml).find("writable by group or others") != std::string::npos);
  chmod(drv.dir.Str("bin").c_str(), 0755);
  CHECK(plan_with(yaml) == "");
  // A mount onto the kernel's files, a path that is not clean, a block device, a node outside /dev.
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string t = yaml;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  CHECK(plan_with(edit("containerPath: /usr/local/driver-bin", "containerPath: /proc/sys/kernel"))
            .find("not a clean path outside /proc, /sys and /dev") != std::string::npos);
  CHECK(plan_with(edit("containerPath: /usr/local/driver-bin", "containerPath: /usr/../etc")).find("not a clean path") !=
        std::string::npos);
  CHECK(plan_with(edit("type: c\n      major: 1\n      minor: 3", "type: b\n      major: 8\n      minor: 0"))
            .find("only character devices") != std::string::npos);
  CHECK(plan_with(edit("  - path: /dev/nvidiactl", "  - path: /etc/shadow")).find("not a clean path below /dev") !=
        std::string::npos);
  // No device of its own for the GPU; only "all", which holds the other rank's GPU too.
  CHECK(plan_with(yaml, {"/dev/nvidia7"}) == "no CDI device of kind nvidia.com/gpu has the device node /dev/nvidia7");
  CHECK(plan_with(edit("- path: /dev/nvidia0\n      type: c", "- path: /dev/nvidia9\n      type: c"))
            .find("CDI device all also holds /dev/nvidia1, another task's GPU") != std::string::npos);
  // A create-symlinks link that is not a clean path.
  CHECK(plan_with(edit("::/usr/lib/x86_64-linux-gnu/libcuda.so", "::/usr/lib/../../etc/libcuda.so"))
            .find("is not a clean absolute path") != std::string::npos);
}

TEST_CASE("CDI symlinks are made inside the container's root, whatever the image's symlinks say") {
  TempDir root;
  fs::create_directories(root.Str("etc"));
  fs::create_symlink("/etc", root.Str("lib"));           // absolute: out of the root if followed by root
  fs::create_symlink("../../../../etc", root.Str("up"));  // relative escape
  std::ofstream(root.Str("etc/libcuda.so")) << "image's stub";
  fs::create_directories(root.Str("etc/dir"));
  const int fd = open(root.Str().c_str(), O_PATH | O_DIRECTORY);
  REQUIRE(fd >= 0);
  CHECK(MakeInRoot(fd, {"/lib/x86_64/libcuda.so.1", false, "libcuda.so.555.1"}) == "");
  CHECK(MakeInRoot(fd, {"/up/libmlsched-test.so.1", false, "x"}) == "");
  CHECK(MakeInRoot(fd, {"/lib/libcuda.so", false, "libcuda.so.1"}) == "");  // the image's file replaced
  CHECK(MakeInRoot(fd, {"/etc/dir", false, "x"}).find("replace /etc/dir with a symlink") != std::string::npos);
  close(fd);
  CHECK(fs::read_symlink(root.Str("etc/x86_64/libcuda.so.1")) == "libcuda.so.555.1");
  CHECK(fs::read_symlink(root.Str("etc/libmlsched-test.so.1")) == "x");
  CHECK(fs::read_symlink(root.Str("etc/libcuda.so")) == "libcuda.so.1");
  CHECK(!fs::exists(fs::symlink_status("/etc/x86_64/libcuda.so.1")));
  CHECK(!fs::exists(fs::symlink_status("/etc/libmlsched-test.so.1")));
}
