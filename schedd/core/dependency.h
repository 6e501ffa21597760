// Job dependencies and job arrays (Slurm's sbatch --dependency and --array): parsing what users
// write, and deciding whether a pending job's dependencies hold. Pure: the caller passes the job
// states it knows in a ClusterState.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// A job reference as users write it: "12" (job 12, or every element of array 12) or "12_3"
/// (element 3 of array 12).
struct JobRef {
  JobId job = 0;
  std::optional<int32_t> array_task;
  bool operator==(const JobRef&) const = default;
};
/// Parses "12" or "12_3"; nullopt when it is neither (ids must be > 0).
std::optional<JobRef> ParseJobRef(const std::string& text);

/// One dependency term as written, before the server resolves array references.
struct DependencyTerm {
  DependencyType type = DependencyType::kAfterAny;
  std::vector<JobRef> jobs;  // empty for singleton
};
/// A parsed --dependency: terms joined by ',' (all must hold) or '?' (any one suffices).
struct DependencyRequest {
  std::vector<DependencyTerm> terms;
  bool any = false;
};

/// "afterok" -> kAfterOk, ... (DependencyTypeName's inverse).
std::optional<DependencyType> ParseDependencyType(const std::string& name);

/// Parses sbatch's --dependency syntax: "afterok:12:13,afterany:14_2", "afterok:12?afternotok:13",
/// "singleton" (types after, afterany, afterok, afternotok, singleton; ',' and '?' not mixed).
/// Returns an error naming the offending term, or nullopt and fills `out`.
std::optional<std::string> ParseDependency(const std::string& text, DependencyRequest* out);

/// A parsed --array: element ids (sorted, unique, each in [0, kMaxArrayTaskId]) and the "%N"
/// limit on running elements (0 = none).
struct ArrayRequest {
  std::vector<int32_t> task_ids;
  int32_t max_running = 0;
};
/// Largest array element id accepted (Slurm's MaxArraySize - 1 with a large MaxArraySize).
constexpr int32_t kMaxArrayTaskId = 999'999;

/// Parses sbatch's --array syntax: comma-separated ids and ranges with an optional step
/// ("0-99", "1,3,5-11:2"), then an optional "%N". More than `max_elements` elements is an error.
/// Returns an error naming what is wrong, or nullopt and fills `out`.
std::optional<std::string> ParseArray(const std::string& text, int32_t max_elements, ArrayRequest* out);

/// Whether a pending job's dependencies hold now, never can, or may later.
struct DependencyStatus {
  enum class Kind { kSatisfied, kWaiting, kNever };
  Kind kind = Kind::kSatisfied;
  std::string detail;  // the term that waits or fails, e.g. "afterok:12 (job 12 is RUNNING)"
};

/// States of the jobs in a snapshot (ClusterState::jobs and ::finished), by id.
class JobStateIndex {
 public:
  explicit JobStateIndex(const ClusterState& state);
  /// The job's state, or nullopt when the snapshot does not know it.
  std::optional<JobState> StateOf(JobId id) const;

 private:
  std::unordered_map<JobId, JobState> states_;
};

/// Evaluates `spec.dependencies` (singleton terms excepted: LimitTracker holds those, since they
/// change as the cycle starts jobs). A job the index does not know counts as satisfied, like Slurm
/// after the job was purged. kAfterOk on a job that ended otherwise, or kAfterNotOk on one that
/// COMPLETED, can never hold: with ',' the whole list then never holds; with '?' only when every
/// term never holds.
DependencyStatus EvaluateDependencies(const JobSpec& spec, const JobStateIndex& index);

/// The resolved dependencies in sbatch syntax, e.g. "afterok:12:13,singleton" ("" = none).
std::string FormatDependencies(const JobSpec& spec);

/// True when `spec` has a singleton term.
bool IsSingleton(const JobSpec& spec);

}  // namespace mlsched::core
