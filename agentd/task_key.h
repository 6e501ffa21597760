// Keys of the agent's bookkeeping: an attempt is (job id, attempt number); a task is one rank of it.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

namespace mlsched::agent {

/// One launch attempt of a job; every launch message is keyed by it.
struct AttemptKey {
  int64_t job_id = 0;
  int32_t attempt = 0;
  auto operator<=>(const AttemptKey&) const = default;
  /// "JOB.ATTEMPT", as used for per-attempt directories and logs.
  std::string ToString() const { return std::to_string(job_id) + "." + std::to_string(attempt); }
};

/// One task (rank) of an attempt.
struct TaskKey {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  auto operator<=>(const TaskKey&) const = default;
  AttemptKey Attempt() const { return {job_id, attempt}; }
  /// "JOB.ATTEMPT/RANK" for log lines.
  std::string ToString() const { return Attempt().ToString() + "/" + std::to_string(rank); }
};

}  // namespace mlsched::agent
