// Task progress from the status files tasks keep (MLSCHED_STATUS_FILE; mltrain writes step and
// last_checkpoint_unix_s there). The files are the users': they are read by a thread of their own,
// never by the heartbeat or stream threads, so a file that stalls a read (a FIFO is refused, but a
// hung FUSE or NFS mount would not be) delays progress figures, never the node's heartbeats.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agentd/task_key.h"

namespace mlsched::agent {

/// What a task said of itself last; zeros when it said nothing (yet).
struct TaskProgress {
  int64_t step = 0;
  int64_t last_checkpoint_unix_s = 0;  // wall-clock seconds since the epoch
  int64_t compute_ms = -1;             // milliseconds outside collectives (status file compute_s); -1 = not told
  int32_t gpu_util_percent = -1;       // its GPUs' mean utilization (NVML); -1 = not measured
  int64_t gpu_power_mw = -1;           // its GPUs' summed power draw (NVML), milliwatts; -1 = not measured
  int64_t gpu_memory_bytes = -1;       // their memory in use (bytes); -1 = not measured
  bool operator==(const TaskProgress&) const = default;
};

/// Reads one status file at `path` (its directory opened with O_NOFOLLOW, the file with
/// O_NOFOLLOW|O_NONBLOCK, regular files of at most kMaxStatusFileBytes only). Missing, refused or
/// unparsable files, and non-numeric fields, give nullopt or leave fields at 0.
std::optional<TaskProgress> ReadTaskProgress(const std::string& path);

/// Keeps the last progress read for each running task. One thread, started by Start(), walks the
/// tasks `list` returns every `period` and calls `read` for each; Get() only looks up the map, so
/// it never waits on a file. Entries of tasks no longer listed are dropped.
class TaskProgressCache {
 public:
  using ListFn = std::function<std::vector<TaskKey>()>;
  using ReadFn = std::function<std::optional<TaskProgress>(const TaskKey&)>;
  TaskProgressCache(ListFn list, ReadFn read, std::chrono::milliseconds period);
  /// Stop().
  ~TaskProgressCache();
  TaskProgressCache(const TaskProgressCache&) = delete;
  TaskProgressCache& operator=(const TaskProgressCache&) = delete;

  void Start();
  /// Wakes the reader and joins it; a read stuck in the kernel is waited for (detaching would leave
  /// it running over freed state), so Stop() can block where Get() never does.
  void Stop();
  /// The last progress read for `key`; zeros if none yet. Never blocks on a file.
  TaskProgress Get(const TaskKey& key) const;
  /// One pass over the listed tasks on the calling thread (what the reader thread does each period).
  void RefreshOnce();

 private:
  ListFn list_;
  ReadFn read_;
  std::chrono::milliseconds period_;
  mutable std::mutex mu_;  // guards progress_, stop_
  std::condition_variable cv_;
  std::map<TaskKey, TaskProgress> progress_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlsched::agent
