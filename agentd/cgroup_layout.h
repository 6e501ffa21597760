// Which cgroup controllers this node offers agentd, found once at agent start from
// /proc/self/mountinfo, /proc/self/cgroup and the unified hierarchy's cgroup.controllers: cgroup v2
// (unified) where it has the memory controller, else the v1 hierarchies that are mounted. The
// result is plain data; agentd/cgroups.h creates the task cgroups under it.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace mlsched::agent {

/// --cgroups: kAuto uses what the kernel offers (possibly nothing), kRequired refuses to start
/// without the memory, cpu and pids controllers, kOff never touches cgroups.
enum class CgroupMode { kAuto, kOff, kRequired };
/// "auto", "off" or "required".
std::optional<CgroupMode> ParseCgroupMode(std::string_view text);

/// The controllers agentd can use and where agentd's own cgroup is in each hierarchy.
struct CgroupLayout {
  int version = 0;     // 0 = none, 1 = v1 hierarchies, 2 = unified (v2)
  std::string v2_dir;  // v2: agentd's own cgroup, e.g. /sys/fs/cgroup/system.slice/agentd.service
  /// v1: agentd's own cgroup in the hierarchy of each controller used ("memory", "cpu", "pids",
  /// "devices", "freezer"); co-mounted controllers (cpu,cpuacct) share a directory.
  std::map<std::string, std::string> v1_dirs;
  /// agentd's cgroup path as /proc/self/cgroup shows it, by controller ("" for v2): task cgroups
  /// are recognised in /proc/PID/cgroup below it.
  std::map<std::string, std::string> paths;
  /// Usable controllers: on v1 the keys of v1_dirs; on v2 "memory", "cpu" and "pids" when listed in
  /// cgroup.controllers, plus "kill" (cgroup.kill, Linux 5.14+) or else "freeze" (cgroup.freeze),
  /// and "devices" once Cgroups::Init() found it may load eBPF device programs.
  std::set<std::string> controllers;

  bool Has(const std::string& controller) const { return controllers.count(controller) > 0; }
  /// For registration and `mladmin nodes`: "v1:memory,cpu,pids,devices,freezer",
  /// "v2:memory,cpu,pids,devices,kill", or "none".
  std::string Summary() const;
  /// What is not enforced and why, e.g. "pids, devices (cgroup v2 needs an eBPF device program,
  /// which could not be loaded)"; "" when everything is.
  std::string Missing() const;
  /// The log line at agent start: "cgroups: v1 memory, cpu, pids, devices, freezer" or
  /// "cgroups: none - tasks run without memory/CPU/device limits (...)".
  std::string Describe() const;
};

/// Reads a file: its contents, or nullopt when it does not exist (tests pass a fake).
using FileProbe = std::function<std::optional<std::string>(const std::string& path)>;

/// The layout from the text of /proc/self/mountinfo and /proc/self/cgroup; `probe` reads the
/// unified hierarchy's cgroup.controllers and tells whether cgroup.kill / cgroup.freeze exist.
/// Rule: v2 when agentd's unified cgroup offers the memory controller; else v1 when any of memory,
/// cpu, pids, devices or freezer is mounted as a v1 hierarchy; else v2 (process tracking and kill
/// only) when cgroup2 is mounted at all; else none.
CgroupLayout ParseCgroupLayout(const std::string& mountinfo, const std::string& proc_cgroup, const FileProbe& probe);

/// ParseCgroupLayout of this process, reading the real files.
CgroupLayout DetectCgroups();

/// Unescapes the octal escapes of /proc/*/mountinfo fields ("\040" is a space).
std::string UnescapeMountField(std::string_view field);

}  // namespace mlsched::agent
