// Reload in place: agentd replaces its own image with execve(2) of its binary (SIGHUP, e.g. after
// a package upgrade) and keeps the node's tasks. They stay its children across the exec (the
// thread that forked them, the main thread, is the one that survives it), so the new image waits
// for them, reads their exit statuses and keeps their cgroups, as Nomad's client re-attaches to
// its tasks after a restart. What only lived in memory goes across in a file written just before
// the exec: the tasks (key and pid) and the committed attempts they belong to (the Prepare each
// was planned from, so the new image plans it again: devices held, environment, directory).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agentd/task_key.h"
#include "common/units.h"

namespace mlsched::agent {

/// Most tasks and attempts one state file may list, and its largest size (bytes): a node runs at
/// most a few hundred ranks; a Prepare is at most the agent's 64 MiB message limit.
constexpr size_t kMaxReloadTasks = 65536;
constexpr size_t kMaxReloadAttempts = 65536;
constexpr size_t kMaxReloadPrepareBytes = 64u << 20;
constexpr size_t kMaxReloadStateBytes = 1u << 30;

/// The file's name in the agent's work directory (root's, mode 0600).
inline constexpr const char* kReloadStateFileName = "reload.state";
/// The variable that tells the new image a reload's state is waiting (its value: the file).
inline constexpr const char* kReloadStateEnv = "MLSCHED_AGENTD_RELOAD_STATE";

/// What the old image hands the new one.
struct ReloadState {
  struct Attempt {
    AttemptKey key;
    int32_t master_port = 0;  // from its commit (MASTER_PORT)
    std::string image_digest;  // its ranks run in this cached image ("sha256:<64 hex>"); "" = bare
    std::string prepare;      // the v1::Prepare it was planned from, serialized
  };
  struct Task {
    TaskKey key;
    pid_t pid = 0;               // the task's leader (its process group), a child of agentd
    int64_t max_rss_bytes = -1;  // the most anonymous memory sampled so far; -1 = unknown
  };
  /// When the stream to schedd ended, in steady_clock (CLOCK_MONOTONIC, system-wide) milliseconds;
  /// nullopt while registered. Carries the cut-off bound across the exec.
  std::optional<int64_t> disconnected_since_ms;
  std::vector<Attempt> attempts;
  std::vector<Task> tasks;
};

/// The file's text: a version line, then one line per field, attempt and task (a Prepare in hex,
/// "-" for no image digest).
std::string FormatReloadState(const ReloadState& state);

/// Parses FormatReloadState's text. Errors name the line and what is wrong ("line 3: bad pid
/// 'x'"); every count and size is checked against the limits above; a task whose attempt is not
/// listed is refused.
Parsed<ReloadState> ParseReloadState(const std::string& text);

}  // namespace mlsched::agent
