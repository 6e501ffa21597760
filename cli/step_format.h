// mlq --steps: a table or JSON of job steps (JobService.ListSteps), as squeue --steps and sacct
// show them (JOB.STEP ids).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "mlsched/v1/jobs.pb.h"

namespace mlsched::cli {

/// "STEPID NAME STATE TASKS EXIT ELAPSED USER NODES" lines (the header unless `noheader`), one
/// per step; ELAPSED runs to `now` (seconds since epoch) while the step runs.
std::string FormatStepTable(const std::vector<v1::StepInfo>& steps, int64_t now, bool noheader);
/// One step as JSON: step_id "12.0", job_id, step, name, state, ntasks, exit_code, start_time,
/// end_time, elapsed_s, user, nodes (a list).
nlohmann::json StepJson(const v1::StepInfo& step, int64_t now);

}  // namespace mlsched::cli
