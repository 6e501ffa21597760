// Device access on cgroup v2: there is no devices.deny file; the kernel asks the eBPF programs of
// type BPF_PROG_TYPE_CGROUP_DEVICE attached to the cgroup and its ancestors (as runc and systemd
// do). agentd attaches, to each task cgroup that must not open some devices, a small program that
// refuses exactly those (type, major, minor) and allows everything else.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlsched::agent {

/// One device node: character or block, major:minor.
struct DeviceId {
  bool block = false;
  uint32_t major = 0;
  uint32_t minor = 0;
  bool operator==(const DeviceId&) const = default;
};

/// The device behind `path` (stat, following symlinks); false when it is no device node.
bool DeviceOf(const std::string& path, DeviceId* out);

/// True when this process may load cgroup device programs (root, a kernel with CONFIG_CGROUP_BPF).
bool CanFilterDevices();

/// Loads a program refusing every access (read, write, mknod) to `denied` and attaches it to the
/// cgroup v2 directory `cgroup_dir` with BPF_F_ALLOW_MULTI, so the programs of its ancestors still
/// apply too. The attachment lives as long as the cgroup. Returns "" or an error naming the step.
std::string AttachDeviceDenyProgram(const std::string& cgroup_dir, const std::vector<DeviceId>& denied);

}  // namespace mlsched::agent
