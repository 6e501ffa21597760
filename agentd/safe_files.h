// File operations agentd (usually root) performs next to users' files. Root never follows a path a
// user controls: attempt directories are filled while still root-only and handed to the user last;
// files inside a user-writable directory are opened relative to a directory fd with O_NOFOLLOW,
// checked with fstat, size-capped and read without blocking; trees are removed through directory
// fds, so a symlink swapped in mid-way is unlinked, never followed (the class of Slurm's
// CVE-2023-41914).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace mlsched::agent {

/// Largest batch script written (bytes); schedd refuses larger ones at submit (Slurm's default
/// max_script_size is 4 MiB).
inline constexpr size_t kMaxScriptBytes = 4 << 20;
/// Largest status file read from a task (bytes); mltrain's is under 1 KiB.
inline constexpr size_t kMaxStatusFileBytes = 64 << 10;

/// Creates `dir` (its parent must exist and be writable only by the agent) with mode 0700, writes
/// `script` (when not empty) to dir/script with mode 0700, and only then hands both to uid/gid
/// (when `chown_to_user`), every step through file descriptors. Fails if `dir` already exists.
/// Returns "" or an error naming the path.
std::string CreateAttemptDir(const std::string& dir, const std::string& script, bool chown_to_user, uid_t uid, gid_t gid);

/// Reads `dir`/`name` if it is a regular file of at most `max_bytes` bytes: no symlink is followed
/// (neither `name` nor the last component of `dir`), FIFOs and devices are refused without
/// blocking. Returns "" with the contents in `out`, or the reason it was not read. `st`, when
/// given, receives the fstat of the file that was read (its owner and mode, without a second lookup).
std::string ReadRegularFileAt(const std::string& dir, const std::string& name, size_t max_bytes, std::string* out,
                              struct stat* st = nullptr);

/// Removes `dir` and everything below it through directory fds (unlinkat/openat with O_NOFOLLOW):
/// symlinks are removed, never followed, whatever is swapped in during the walk. Returns "" or the
/// first error.
std::string RemoveTree(const std::string& dir);

}  // namespace mlsched::agent
