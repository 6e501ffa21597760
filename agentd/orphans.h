// Orphan tracking for "no process outlives its task": agentd is a child subreaper, so descendants
// of a task whose parent died (double forks, setsid'd daemons) are re-parented to agentd. This
// module lists those children and attributes each to its task through the MLSCHED_* variables it
// inherited, so the supervisor can kill the ones whose task has ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agentd/task_key.h"

namespace mlsched::agent {

/// Direct children of this process, from /proc/self/task/*/children (every thread's list).
std::vector<pid_t> ListChildren();

/// The task a process was started for, from MLSCHED_JOB_ID, MLSCHED_ATTEMPT and MLSCHED_TASK_ID
/// in its environment block `environ` (NUL-separated KEY=VALUE, as in /proc/PID/environ).
std::optional<TaskKey> TaskFromEnviron(const std::string& environ);

/// The parent of `pid` (the ppid field of /proc/PID/stat, proc(5)); -1 when the process is gone or
/// the file is unreadable.
pid_t ParentPid(pid_t pid);

/// TaskFromEnviron of /proc/PID/environ; nullopt when unreadable or not a task's descendant.
std::optional<TaskKey> TaskOfProcess(pid_t pid);

/// CPU time of process `pid` and of its children it has reaped (microseconds): utime + stime +
/// cutime + cstime of /proc/PID/stat (proc(5)) in clock ticks (sysconf(_SC_CLK_TCK)). A task's use
/// when it has no cgroup; processes it started and did not wait for are missed. nullopt when the
/// process is gone or the file is not what proc(5) describes.
std::optional<int64_t> ProcessCpuUsec(pid_t pid);
/// ProcessCpuUsec for the text of a /proc/PID/stat file and `ticks_per_second`.
std::optional<int64_t> CpuUsecFromStat(const std::string& stat, long ticks_per_second);

}  // namespace mlsched::agent
