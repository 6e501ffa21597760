// The OCI runtime spec (config.json, runtime-spec 1.0.2) agentd writes for one containerized task.
// Pure: no I/O. What it encodes: the job's uid, gid and groups, no capabilities at all,
// no_new_privs, a seccomp filter refusing the system calls Docker's default profile refuses to an
// unprivileged container (seccomp_profile), its own PID, IPC and mount namespaces with the host's
// network and UTS (NCCL and Gloo need the host network), only the devices it is given (its GPUs),
// and the binds agentd prepared (attempt directory, /tmp, the job's /dev/shm, home, the user's).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlsched::agent {

/// A bind mount in the container. `source` is a host path agentd controls, or /proc/<pid>/fd/<n>
/// of a descriptor opened as the job's user (container_bundle.h).
struct OciBind {
  std::string source;
  std::string destination;  // absolute, clean
  bool read_only = false;
};

/// A character device passed into the container (a GPU, nvidiactl, nvidia-uvm).
struct OciDevice {
  std::string path;  // the same path in the container
  int64_t major = 0;
  int64_t minor = 0;
  uint32_t file_mode = 0666;
};

/// Everything one task's config.json says.
struct OciTaskSpec {
  std::string rootfs;                 // absolute: the bundle's rootfs mount
  std::vector<std::string> args;      // args[0] searched on the container's PATH by runc
  std::vector<std::string> env;       // "KEY=VALUE"
  std::string cwd = "/";              // absolute, in the container
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;          // supplementary
  mode_t umask = 022;
  std::vector<OciBind> binds;
  std::vector<OciDevice> devices;
  /// runc's cgroupsPath: relative, so runc makes it under its own cgroup in every hierarchy, which
  /// is the task's cgroup where agentd has one (the limits there hold for everything below).
  std::string cgroups_path;
  bool use_seccomp = true;
};

/// The config.json text for `spec`.
std::string BuildOciSpec(const OciTaskSpec& spec);

/// System calls the seccomp filter answers with EPERM: those Docker's default profile denies to a
/// container without CAP_SYS_ADMIN and friends (kernel modules, mounts, namespaces, keyrings, BPF,
/// kexec, clock and swap changes, userfaultfd, ...). Everything else is allowed: the container
/// already has no capabilities, this narrows the kernel surface.
const std::vector<std::string>& DeniedSyscalls();

}  // namespace mlsched::agent
