// A process run inside a task's running container (an interactive session in a job that runs in
// an image): `runc exec --process P` with P made from the container's own config.json (its user,
// groups, capabilities, no_new_privileges, rlimits, AppArmor and working directory) and the
// session's command and variables. With a terminal, runc makes one inside the container (its
// devpts; the session's process has it as its controlling terminal, in the container's
// namespaces) and copies it to its own stdio, a pty agentd made: nobody has that host pty as a
// controlling terminal (runc runs in a session of its own without one), so a TIOCSTI from the
// container reaches only the container's terminal. A resize is applied to the host pty and
// signalled to runc (SIGWINCH), which resizes the container's.
#pragma once

#include <sys/types.h>

#include <string>

#include "agentd/task_driver.h"
#include "common/units.h"

namespace mlsched::agent {

/// Where a container's runc state and files are.
struct ContainerExecSite {
  std::string runc;          // absolute path of runc
  std::string runc_root;     // runc --root
  std::string bundle_dir;    // the task's bundle (config.json there, root's, mode 0600)
  std::string container_id;  // mlsched-JOB.ATTEMPT.RANK
  std::string log_path;      // runc --log
};

/// The process.json of a session: the "process" object of `config_json` (the container's spec)
/// with args = `argv`, env = the container's with `env` set over it (NAME=VALUE), terminal = `pty`
/// and consoleSize rows x cols when given. An error when config.json has no process.
Parsed<std::string> ExecProcessJson(const std::string& config_json, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env, bool pty, uint32_t rows, uint32_t cols);

/// The plan for `want` in the container at `site` (waiting up to 10 s for a container still being
/// created to have its runc state): writes its process.json in the bundle (0600)
/// and returns a `runc exec` run as root with the session's stdio (a pty agentd made, never its
/// controlling terminal, or pipes; runc's own errors reach the session's output). The plan's
/// cleanup removes the file.
std::string PlanContainerExec(const ContainerExecSite& site, const ExecRequest& want, ExecPlan* plan);

}  // namespace mlsched::agent
