// The OCI bundle of one containerized task, made by agentd (root) in its own directory
// <work_dir>/containers/<job>.<attempt>.<rank>: the cached image as the lower layer of an overlay
// mounted nosuid,nodev (a private upper layer per task; read-only unless --container-writable),
// the mount points of the task's binds created inside it without following the image's symlinks
// out of it (openat2 RESOLVE_IN_ROOT), a private /tmp for the task, and config.json. The job's
// /dev/shm on the node is a tmpfs of its own, shared by the job's ranks there. Paths the user names
// are opened as the user (OpenAsUser) and handed to the runtime as /proc/<agentd>/fd/<n>, so root
// never resolves them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"

namespace mlsched::agent {

/// A mount point to create in the rootfs, or a symlink (CDI's create-symlinks, cdi_plan.h).
struct MountPoint {
  MountPoint(std::string p, bool dir = true, std::string target = {})
      : path(std::move(p)), directory(dir), symlink_target(std::move(target)) {}
  std::string path;  // absolute, clean
  bool directory = true;
  std::string symlink_target;  // non-empty: `path` is made a symlink to this (a file there replaced)
};

/// One task's bundle on disk; TearDown() undoes it (also from the destructor).
class ContainerBundle {
 public:
  ~ContainerBundle();
  ContainerBundle(const ContainerBundle&) = delete;
  ContainerBundle& operator=(const ContainerBundle&) = delete;

  /// Makes `dir` (mode 0700; its parent must exist and be agentd's alone), mounts the overlay of
  /// `image_rootfs` on dir/rootfs (nosuid, nodev), creates `mount_points` in it, remounts it
  /// read-only unless `writable`, makes dir/tmp (mode 0700, owned by uid:gid) and writes
  /// dir/config.json from `config_json`. Errors name the step and path; nothing is left behind then.
  static Parsed<std::unique_ptr<ContainerBundle>> Create(const std::string& dir, const std::string& image_rootfs,
                                                         const std::vector<MountPoint>& mount_points, bool writable,
                                                         uid_t uid, gid_t gid);
  /// The bundle in `dir` that this agentd made before a reload in place (its rootfs mounted), for
  /// its exec sessions and its teardown.
  static std::unique_ptr<ContainerBundle> Adopt(const std::string& dir);
  /// Binds what descriptor `fd` (opened as the user: OpenAsUser) refers to onto
  /// dir/mnt/<index>, made a directory or an empty file to match, in agentd's own mount namespace
  /// (a bind from /proc/self/fd/N works only there; runc's would be refused with EINVAL). The
  /// runtime then binds that agentd-owned path. Returns the path, or "" and the error in *err.
  std::string StageUserMount(int fd, bool directory, size_t index, std::string* err);
  /// Writes config.json (mode 0600). Returns "" or the error.
  std::string WriteConfig(const std::string& config_json) const;
  const std::string& Dir() const { return dir_; }
  std::string Rootfs() const { return dir_ + "/rootfs"; }
  std::string Tmp() const { return dir_ + "/tmp"; }
  /// Unmounts everything below the directory (the rootfs, staged mounts; lazily) and removes it,
  /// unless a mount is left (never removes through a mount). Idempotent.
  void TearDown();

 private:
  explicit ContainerBundle(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  bool mounted_ = false;
  bool removed_ = false;
};

/// Creates `path` (absolute) under the directory `root_fd` as if `root_fd` were "/": every
/// component is resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), so
/// a symlink in the image ("../../etc", "/etc") stays inside it. Missing directories are made
/// (mode 0755); the last component is a directory or, with !directory, an empty file (0644), or
/// with a symlink_target a symlink (replacing a file or symlink of the image there, never a
/// directory). Returns "" or the error.
std::string MakeInRoot(int root_fd, const MountPoint& point);

/// Lazily unmounts every mount point below `dir` (from /proc/self/mountinfo, deepest first).
/// True when none is left below it.
bool UnmountBelow(const std::string& dir);

/// Mounts a tmpfs (nosuid, nodev, mode 0700, owned by uid:gid) on `dir` (made if missing), the
/// job's /dev/shm on this node. Already mounted: nothing. Returns "" or the error.
std::string MountJobShm(const std::string& dir, uid_t uid, gid_t gid);
/// Unmounts and removes `dir` (MountJobShm). Errors are logged.
void RemoveJobShm(const std::string& dir);

/// Descriptors opened as a user (OpenAsUser); closed with the object.
struct UserFds {
  std::vector<int> fds;
  std::vector<bool> directory;  // per fd: a directory (else a regular file)
  ~UserFds();
};

/// Opens each of `paths` for reading as uid/gid/groups, in a child process that switched to the
/// user (never as root), and receives the descriptors (SCM_RIGHTS). Only directories and regular
/// files are accepted. Errors name the path with the user's own errno ("mount source /data/x:
/// Permission denied").
Parsed<std::shared_ptr<UserFds>> OpenAsUser(const std::vector<std::string>& paths, uid_t uid, gid_t gid,
                                            const std::vector<gid_t>& groups);

}  // namespace mlsched::agent
