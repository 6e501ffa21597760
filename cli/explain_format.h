// mlq --explain: why a job waits (like sprio plus squeue's pending reason), as a readable block or
// a JSON object, from JobService.ExplainJob's answer.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "mlsched/v1/jobs.pb.h"

namespace mlsched::cli {

/// The block mlq --explain prints: the job's state, reason and detail, expected start, queue order
/// and, for a pending job, one line per priority factor (FACTOR WEIGHT VALUE WEIGHTED: weight,
/// factor in [0,1], weight x factor), nice and the total. Ends with a newline. Every text from
/// schedd (names, reason and detail, start basis, resize) is escaped for the terminal.
std::string FormatExplain(const v1::ExplainJobResponse& r);

/// The mlq --explain --json object: job_id, name, user, account, partition, qos, state, reason,
/// reason_detail, expected_start (Unix seconds, 0 = unknown), queue_order, priority (computed now;
/// the last cycle's value when not pending), fairshare_factor, factors {age, fairshare, job_size,
/// partition, qos} (null when not pending), weights {age, fairshare, job_size, partition, qos,
/// max_age, favor_small}, weighted {age, ...: weight x factor} (null when not pending), nice,
/// computed_at (Unix seconds).
nlohmann::json ExplainJson(const v1::ExplainJobResponse& r);

}  // namespace mlsched::cli
