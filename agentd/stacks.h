// Stack traces of a rank's processes for the gang watchdog (schedd's CollectStacks): elfutils'
// eu-stack for native code, py-spy's dump for Python where installed, else gdb in batch mode. The
// tools run as the job's user, never as root (they parse the user's binaries and memory; the
// kernel lets a user trace their own processes where kernel.yama.ptrace_scope is 0), bounded in
// time and output; the traces are written into the job's working directory as that user.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "agentd/container_tools.h"

namespace mlsched::agent {

/// Bounds of one rank's traces.
inline constexpr size_t kMaxTracedProcesses = 16;       // processes per rank (its cgroup's first)
inline constexpr size_t kMaxTraceBytes = 256 * 1024;     // output kept per rank
inline constexpr std::chrono::seconds kTraceTimeout{20}; // per process

/// The tools found on PATH ("" = absent).
struct StackTools {
  std::string eu_stack, py_spy, gdb;
  bool Any() const { return !eu_stack.empty() || !py_spy.empty() || !gdb.empty(); }
};
StackTools FindStackTools(const std::string& path_list = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");

/// Whether `traces` show a main thread waiting in a collective operation (NCCL, Gloo, c10d, MPI:
/// all-reduce, all-gather, reduce-scatter, broadcast, barrier): case-insensitive frame names.
/// Other threads are ignored: Gloo's loop and NCCL's proxy threads live in every rank.
bool InCollective(std::string_view traces);

/// The main thread of each process in `traces` (TakeTraces' "==== PID" sections kept): eu-stack's
/// "TID <pid>:" block (else its first), gdb's "Thread 1", py-spy's "MainThread"; a section without
/// thread headers whole.
std::string MainThreads(std::string_view traces);

/// The innermost frames of the first threads in `traces` ("#0 ... < #1 ... | #0 ..."), at most
/// `max_bytes`: what schedd's event and `mlq --explain` show.
std::string SummarizeTraces(std::string_view traces, size_t max_bytes = 1024);

/// The processes of a task: its cgroups' cgroup.procs (`cgroup_dirs`), else `pid` alone; at most
/// kMaxTracedProcesses, `pid` first.
std::vector<pid_t> TaskProcesses(const std::vector<std::string>& cgroup_dirs, pid_t pid);

/// The traces of `pids` as `user`: "==== PID N (COMM) ====" then the tool's output, each process
/// bounded by kTraceTimeout, the whole by kMaxTraceBytes. `*error` names what failed ("" when
/// every process was traced).
std::string TakeTraces(const StackTools& tools, const std::vector<pid_t>& pids, const ToolUser& user, std::string* error);

/// Writes `text` to `dir`/`name` as `user` (a helper process that switches to the user first, so
/// root never writes into the user's directory): created new (O_EXCL, O_NOFOLLOW), mode 0600.
/// Returns "" or the error.
std::string WriteFileAsUser(const std::string& dir, const std::string& name, const std::string& text, const ToolUser& user);
/// Appends `text` to the existing regular file `path` (absolute) as `user`, in the same kind of
/// helper: O_APPEND, O_NOFOLLOW, O_NONBLOCK (a FIFO or a device in its place is refused, never
/// waited on); never created. Returns "" or the error.
std::string AppendToFileAsUser(const std::string& path, const std::string& text, const ToolUser& user);

}  // namespace mlsched::agent
