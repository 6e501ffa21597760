// Slurm-style output file patterns (sbatch --output/--error): %j job id, %t task rank, %u user,
// %x job name, %n node name, %% a literal percent. As in Slurm, a number between '%' and the letter
// zero-pads numeric fields ("%4j" -> "0042").
#pragma once

#include <cstdint>
#include <string>

#include "common/units.h"

namespace mlsched::agent {

/// The values a pattern may refer to.
struct PatternValues {
  int64_t job_id = 0;
  int32_t rank = 0;
  std::string user;
  std::string job_name;
  std::string node;
  int64_t array_job_id = 0;  // %A (the job id when not an array element)
  int32_t array_task_id = 0; // %a (0 when not an array element)
};

/// Expands `pattern`; an unknown specifier or a dangling '%' is an error naming the pattern, e.g.
/// "bad output pattern 'out-%q': unknown specifier %q".
Parsed<std::string> ExpandOutputPattern(const std::string& pattern, const PatternValues& values);

/// Expands `pattern` (or `fallback` when it is empty) and makes it absolute: a relative result is
/// resolved against `workdir`.
Parsed<std::string> ResolveOutputPath(const std::string& pattern, const std::string& fallback,
                                      const PatternValues& values, const std::string& workdir);

}  // namespace mlsched::agent
