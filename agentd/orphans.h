// Orphan tracking for "no process outlives its task": agentd is a child subreaper, so descendants
// of a task whose parent died (double forks, setsid'd daemons) are re-parented to agentd. This
// module lists those children and attributes each to its task through the MLSCHED_* variables it
// inherited, so the supervisor can kill the ones whose task has ended.
#pragma once

#include <sys/types.h>

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

/// TaskFromEnviron of /proc/PID/environ; nullopt when unreadable or not a task's descendant.
std::optional<TaskKey> TaskOfProcess(pid_t pid);

}  // namespace mlsched::agent
