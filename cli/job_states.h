// Job state names and codes as the tools print and accept them (Slurm's squeue/scancel vocabulary),
// and signal names for mlcancel -s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/units.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// Slurm's long name of a state: "PENDING", "RUNNING", ...; "UNKNOWN" for unspecified values.
std::string StateName(v1::JobState state);

/// Slurm's short code of a state (squeue %t): PD R CG CD F CA TO PR NF.
std::string StateCode(v1::JobState state);

/// True for states a job never leaves (COMPLETED, FAILED, CANCELLED, TIMEOUT).
bool IsFinished(v1::JobState state);

/// Parses a comma list of states given by long name or short code, case-insensitive
/// ("pd,RUNNING", "CA"). "all" selects every state and yields an empty list (= no filter).
/// Duplicates are dropped. Error: "unknown job state 'XX' (valid: PENDING/PD, RUNNING/R, ...)".
Parsed<std::vector<v1::JobState>> ParseStates(const std::string& text);

/// Parses a signal given as a name with or without "SIG" ("TERM", "SIGUSR1", "kill") or a number
/// in [1, 64]. Error: "unknown signal 'FOO'".
Parsed<int> ParseSignal(const std::string& text);

/// Parses a job id: a positive decimal integer. Error: "'x' is not a job id".
Parsed<int64_t> ParseJobId(const std::string& text);

}  // namespace mlsched::cli
