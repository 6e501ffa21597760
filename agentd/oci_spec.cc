#include "agentd/oci_spec.h"

#include <nlohmann/json.hpp>

namespace mlsched::agent {
namespace {

using json = nlohmann::json;

json Mount(const std::string& dest, const std::string& type, const std::string& source, std::vector<std::string> options) {
  return {{"destination", dest}, {"type", type}, {"source", source}, {"options", std::move(options)}};
}

json Mounts(const OciTaskSpec& s) {
  json m = json::array();
  m.push_back(Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}));
  m.push_back(Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}));
  m.push_back(Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}));
  m.push_back(Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}));
  m.push_back(Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}));
  m.push_back(Mount("/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}));
  for (const auto& b : s.binds)
    m.push_back(Mount(b.destination, "bind", b.source,
                      {"rbind", "nosuid", "nodev", b.read_only ? "ro" : "rw", "rprivate"}));
  return m;
}

json Linux(const OciTaskSpec& s) {
  json devices = json::array(), rules = json::array();
  rules.push_back({{"allow", false}, {"access", "rwm"}});
  for (const auto& d : s.devices) {
    devices.push_back({{"path", d.path}, {"type", "c"}, {"major", d.major}, {"minor", d.minor},
                       {"fileMode", d.file_mode}, {"uid", 0}, {"gid", 0}});
    rules.push_back({{"allow", true}, {"type", "c"}, {"major", d.major}, {"minor", d.minor}, {"access", "rw"}});
  }
  json linux = {
      {"namespaces", json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "mount"}}})},
      {"devices", devices},
      {"resources", {{"devices", rules}}},
      {"cgroupsPath", s.cgroups_path},
      {"rootfsPropagation", "rprivate"},
      {"maskedPaths", {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                       "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                       "/proc/scsi"}},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}},
  };
  if (s.use_seccomp) {
    linux["seccomp"] = {
        {"defaultAction", "SCMP_ACT_ALLOW"},
        {"architectures", {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"}},
        {"syscalls", json::array({{{"names", DeniedSyscalls()}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", 1}}})},
    };
  }
  return linux;
}

}  // namespace

const std::vector<std::string>& DeniedSyscalls() {
  // Docker's default profile (moby/profiles/seccomp/default.json) allows these only with
  // CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_TIME, ... which a task never has; unshare/setns/clone3
  // are refused so no task makes a user namespace (the largest kernel surface an unprivileged
  // process can reach).
  static const std::vector<std::string> names = {
      "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
      "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "get_mempolicy_home_node",
      "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie",
      "mount", "mount_setattr", "move_mount", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
      "open_tree", "perf_event_open", "pivot_root", "query_module", "quotactl", "quotactl_fd", "reboot",
      "request_key", "setns", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "_sysctl", "umount",
      "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old"};
  return names;
}

std::string BuildOciSpec(const OciTaskSpec& s) {
  json user = {{"uid", s.uid}, {"gid", s.gid}, {"umask", s.umask}};
  if (!s.groups.empty()) user["additionalGids"] = s.groups;
  const json no_caps = json::array();
  json process = {
      {"terminal", false},
      {"user", user},
      {"args", s.args},
      {"env", s.env},
      {"cwd", s.cwd},
      {"capabilities",
       {{"bounding", no_caps}, {"effective", no_caps}, {"inheritable", no_caps}, {"permitted", no_caps}, {"ambient", no_caps}}},
      {"noNewPrivileges", true},
      {"oomScoreAdj", 0},
  };
  json spec = {
      {"ociVersion", "1.0.2"},
      {"process", process},
      {"root", {{"path", s.rootfs}, {"readonly", false}}},  // agentd mounted it read-only, nosuid, nodev
      {"mounts", Mounts(s)},
      {"linux", Linux(s)},
  };
  return spec.dump(1);
}

}  // namespace mlsched::agent
