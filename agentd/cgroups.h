// Resource isolation with cgroups, as Slurm's task/cgroup: every task (rank) runs in its own
// cgroup <own cgroup>/<base>/<job>.<attempt>/rank<r>, in every hierarchy used (one on v2), with
// the limits of its request: memory (swap included where the kernel accounts it), CPU weight and
// quota, a process/thread count and no access to the GPUs of other ranks (v1 devices.deny, v2 an
// eBPF device program). When a task ends every process left in its cgroup is killed (v2
// cgroup.kill, or freeze, SIGKILL each, thaw), so nothing escapes by leaving the process group,
// and membership, not the environment, tells which task an orphan belongs to. The kernel's OOM
// kills in the cgroup turn an exit into OUT_OF_MEMORY.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "agentd/cgroup_layout.h"
#include "agentd/launcher.h"
#include "agentd/task_key.h"
#include "common/units.h"

namespace mlsched::agent {

/// One task's cgroup (a directory per hierarchy on v1, one on v2). Owned by the supervisor from
/// before the fork until the directories are removed.
class TaskCgroup {
 public:
  ~TaskCgroup();
  TaskCgroup(const TaskCgroup&) = delete;
  TaskCgroup& operator=(const TaskCgroup&) = delete;

  /// The cgroup.procs files, open for writing: the forked child writes "0" to each to join before
  /// it execs (LaunchRequest / SpawnTask). Empty once closed.
  std::span<const int> JoinFds() const { return join_fds_; }
  /// Closes the join descriptors (after the fork).
  void CloseJoinFds();
  /// The processes in the cgroup now (zombies excluded).
  std::vector<pid_t> Pids() const;
  /// The kernel's OOM kills in the cgroup since it was made (memory.events / memory.oom_control
  /// oom_kill); 0 without the memory controller.
  int64_t OomKills() const;
  /// Whether the cgroup's memory use ever reached its limit: v1 memory(.memsw).max_usage_in_bytes
  /// at the limit, v2 memory.events "max" > 0. With a SIGKILL exit this tells an OOM kill that
  /// OomKills() cannot see: on v1 the kill is counted in the victim's own cgroup, which for a
  /// container is the runtime's, removed by the time the task is reaped.
  bool HitMemoryLimit() const;
  /// CPU time used by the processes in the cgroup since it was made, the exited included
  /// (microseconds): v2 cpu.stat usage_usec, v1 cpuacct.usage / 1000; nullopt when unreadable (v1
  /// without a cpuacct hierarchy).
  std::optional<int64_t> CpuUsec() const;
  /// Memory of the task's processes (bytes; -1 = unknown, without the memory controller):
  /// `rss` now, anonymous memory (v2 memory.stat anon, v1 memory.stat total_rss: the pages
  /// Slurm's MaxRSS counts, page cache excluded); `peak` the kernel's high-water mark of all memory
  /// charged to the cgroup, page cache included (v2 memory.peak where the kernel has it, else -1;
  /// v1 memory.max_usage_in_bytes).
  struct MemoryUse {
    int64_t rss = -1;
    int64_t peak = -1;
  };
  MemoryUse Memory() const;
  /// The memory limit written (bytes; 0 = none).
  int64_t MemoryLimit() const { return memory_limit_; }
  /// Kills every process in the cgroup: v2 cgroup.kill; else freeze, SIGKILL each member, thaw
  /// (v1 freezer, v2 cgroup.freeze); else SIGKILL the members a few rounds until none is left.
  void KillAll() const;
  /// Removes the task's directories, and its attempt's when no other rank is left there. False
  /// while processes remain (call again later); true when everything is gone.
  bool Remove();
  /// The task's directory in the hierarchy tracking membership (for logs and tests).
  const std::string& Dir() const { return track_dir_; }

 private:
  friend class Cgroups;
  TaskCgroup() = default;
  bool Freeze(bool frozen) const;

  int version_ = 0;
  std::vector<std::string> dirs_;          // the task's directory in each hierarchy
  std::vector<std::string> attempt_dirs_;  // their parents
  std::string track_dir_;                  // whose cgroup.procs lists the members
  std::string memory_dir_;                 // "" without the memory controller
  std::string freezer_dir_;                // v1 freezer or v2 directory with cgroup.freeze; "" without
  std::string cpu_dir_;                    // v2 the task's directory, v1 its cpuacct one; "" without
  bool has_kill_ = false;                  // v2 cgroup.kill
  std::vector<int> join_fds_;
  int64_t memory_limit_ = 0;
};

/// The cgroups of one agent: <base> under agentd's own cgroup in each hierarchy of the layout.
class Cgroups {
 public:
  /// `base` is the directory name the agent's task cgroups live in (BaseName()).
  Cgroups(CgroupLayout layout, std::string base);

  /// "mlsched-<node>-<8 hex digits of a hash of work_dir>": agents sharing a host (tests, several
  /// nodes on one machine) never touch each other's cgroups. Characters other than [A-Za-z0-9._-]
  /// in the node name become '_'.
  static std::string BaseName(const std::string& node, const std::string& work_dir);

  const CgroupLayout& Layout() const { return layout_; }

  /// Creates <base> in each hierarchy and, on v2, enables the memory, cpu and pids controllers down
  /// to it; "devices" joins the layout's controllers there when this process may load eBPF cgroup
  /// device programs (device_filter.h). When agentd's own v2 cgroup holds processes it cannot
  /// delegate controllers: agentd then moves itself into a leaf "<own>/agentd" (the only process
  /// must be agentd, e.g. a systemd service with Delegate=yes); a layout detected from inside that
  /// leaf is taken as its parent.
  /// Task cgroups left by a previous agent with the same base are killed and removed, but those of
  /// `keep` (tasks adopted after a reload in place). Returns "" or an error naming the file.
  std::string Init(const std::set<TaskKey>& keep = {});

  /// Creates the task's cgroup, writes `limits` and opens its join descriptors. Errors name the
  /// file, e.g. "write 67108864 to /sys/fs/cgroup/.../memory.max: Device or resource busy".
  Parsed<std::unique_ptr<TaskCgroup>> Create(const TaskKey& key, const TaskLimits& limits) const;

  /// The task whose cgroup `pid` is in, from /proc/PID/cgroup; nullopt for any other process.
  std::optional<TaskKey> TaskOf(pid_t pid) const;
  /// TaskOf for the text of a /proc/PID/cgroup file.
  std::optional<TaskKey> TaskOfCgroupFile(const std::string& proc_cgroup) const;

  /// Kills every process in every task cgroup under <base> but those of `keep` and removes them,
  /// waiting up to `wait_ms` for the processes to go; then <base> itself when `remove_base`. Returns
  /// how many task cgroups could not be removed.
  int Clear(int wait_ms, bool remove_base, const std::set<TaskKey>& keep = {});

  /// The existing cgroup of task `key` (a task adopted after a reload in place), its memory limit
  /// read back; nullptr when it has none.
  std::unique_ptr<TaskCgroup> Attach(const TaskKey& key) const;

  /// The task's directory in the hierarchy of `controller` (any name on v2: the unified one); ""
  /// when that controller is not used.
  std::string DirOf(const std::string& controller, const TaskKey& key) const;
  /// The task's directories in every hierarchy used.
  std::vector<std::string> DirsOf(const TaskKey& key) const;

 private:
  std::unique_ptr<TaskCgroup> Paths(const TaskKey& key) const;
  std::vector<std::string> BaseDirs() const;  // <own>/<base> per distinct hierarchy
  std::string EnableV2Controllers();
  std::string WriteLimits(const TaskKey& key, const TaskLimits& limits) const;

  CgroupLayout layout_;
  std::string base_;
  std::string track_controller_;  // v1 hierarchy whose membership counts ("freezer" when mounted)
};

/// The exit error of a task the kernel killed for memory: "OUT_OF_MEMORY: task used more than its
/// 64 MiB memory limit (1 process killed by the kernel's OOM killer)".
std::string OutOfMemoryError(int64_t limit_bytes, int64_t kills);

}  // namespace mlsched::agent
