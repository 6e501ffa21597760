// Loads a scheduler policy (TOML, format in policies/README.md) into core::PolicySet.
// All or nothing: a file with any error yields no policy, only the list of errors, each
// "FILE:LINE:COL: message". Unknown keys are errors. The one loader of policy files: schedd,
// mladmin policy check and the simulator (mlsim) all read a policy through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::policy {

/// One problem in a policy file. line/column are 1-based (0 when unknown, e.g. unreadable file).
struct PolicyError {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  /// "FILE:LINE:COL: message".
  std::string ToString() const;
};

/// The policy's [simulation] table: settings only the simulator (mlsim) has. schedd validates them
/// like every other key and then ignores them, so that one file serves both. Each mirrors an mlsim
/// option; unset = the option's value (mlsim's command line wins over the file).
struct SimulationSettings {
  bool exact_runtimes = false;                         // --exact-runtimes: time limit = run time
  bool predict_runtimes = false;                       // --predict-runtimes (users' history)
  std::optional<int32_t> predict_history;              // --predict-history: run times averaged, >= 1
  std::optional<double> predict_scale;                 // --predict-scale: prediction = scale x mean, > 0
  std::optional<core::Duration> cycle_period;          // --cycle-period: 0 = a cycle on events only
  std::optional<core::Duration> checkpoint_interval;   // --checkpoint-interval: 0 = restart
  std::optional<uint64_t> seed;                        // --seed of spot evictions
};

/// Most run times [prediction] may keep per user (`history`).
inline constexpr int32_t kMaxPredictionHistory = 64;

/// Either a complete policy or every error found (never both, never a partial policy).
struct PolicyLoadResult {
  std::optional<core::PolicySet> policy;
  SimulationSettings simulation;  // the [simulation] table (meaningful only when ok())
  std::vector<PolicyError> errors;
  bool ok() const { return policy.has_value(); }
  /// Every error's ToString(), one per line.
  std::string ErrorText() const;
};

/// Parses policy TOML `text`; `source_name` names it in errors (usually the file path).
PolicyLoadResult ParsePolicy(std::string_view text, const std::string& source_name);

/// Reads and parses the file at `path` (an unreadable file is one error at 0:0).
PolicyLoadResult LoadPolicyFile(const std::string& path);

/// Longest duration a policy may give (1000 years), as a string or as integer seconds: larger
/// values are errors, so that neither parsing nor the scheduler's time arithmetic can overflow.
inline constexpr core::Duration kMaxDuration = int64_t{1000} * 365 * 86400;

/// Parses a duration: an integer number of seconds, or a string of number+unit groups with units
/// s, m, h, d, w ("90", "45m", "1d12h"), or Slurm's "[D-]HH:MM:SS" / "MM:SS". nullopt if invalid
/// or over kMaxDuration.
std::optional<core::Duration> ParseDuration(std::string_view text);

}  // namespace mlsched::policy
