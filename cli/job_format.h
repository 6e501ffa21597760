// How mlq shows jobs: squeue-style --format strings (% field codes with optional widths), the
// default table, and the JSON objects of mlq --json.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/units.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// mlq's default columns: JOBID NAME USER ACCOUNT STATE TIME TASKS NODELIST(REASON).
inline constexpr const char* kDefaultJobFormat = "%.10i %.12j %.8u %.10a %.10T %.10M %.6A %R";

/// mlq --start's columns (squeue --start): JOBID PARTITION NAME USER ST START_TIME TASKS
/// NODELIST(REASON); START_TIME is the expected start, N/A when unknown.
inline constexpr const char* kStartJobFormat = "%.10i %.9P %.12j %.8u %.2t %.19S %.6A %R";

/// mlq --start's order: known expected starts first, earliest first; unknown (0) last; then job id.
bool StartOrderLess(const v1::JobInfo& a, const v1::JobInfo& b);

/// One piece of a format string: literal text, or a field code with its width.
struct FormatItem {
  std::string literal;  // text copied as is (when code == 0)
  char code = 0;        // field code letter, e.g. 'j'
  int width = 0;        // 0 = as wide as the value; else pad and truncate to this many characters
  bool right = false;   // "%.10j": right-justify (squeue's '.')
};

/// Parses a squeue-style format: "%[.][width]CODE" fields between literal text, "%%" for '%'.
/// Codes (squeue's meaning unless noted): %i job id, %j name, %u user, %a account, %P partition,
/// %q QoS, %T state, %t state code, %M time used, %l time limit, %L time left, %D nodes,
/// %A tasks (squeue's step task count), %C CPUs, %m memory per task, %b GPUs per task,
/// %R node list or (reason), %N node list, %r reason, %S start (expected start when pending),
/// %V submit time, %e end time, %Q priority, %Z working directory, %y nice, %o command (argv,
/// "(batch script)", or "N/A" in ListJobs summaries, which carry neither).
/// Error: "unknown field code '%Y' in format '...'".
Parsed<std::vector<FormatItem>> ParseJobFormat(const std::string& format);

/// The header line for `items` (field titles like JOBID, NAME, with the same widths).
std::string FormatJobHeader(const std::vector<FormatItem>& items);

/// One job's line (no newline). `now` (Unix seconds) gives the elapsed time of running jobs.
/// Every value is escaped for the terminal (common/safe_text.h: control bytes, C1, bidi controls
/// and invalid UTF-8 as \x1b / \u009b); widths count characters, and a cut never splits one.
std::string FormatJobLine(const std::vector<FormatItem>& items, const v1::JobInfo& job, int64_t now);

/// Appends one job's line and a newline to `out` (mlq's loop: no per-line allocation).
void AppendJobLine(std::string& out, const std::vector<FormatItem>& items, const v1::JobInfo& job, int64_t now);

/// The value of one field code for a job, unpadded ("" for an unknown code).
std::string JobField(char code, const v1::JobInfo& job, int64_t now);
/// The id as users write it: "12", or "12_3" for element 3 of array 12 (squeue's %i).
std::string JobIdText(const v1::JobInfo& job);

/// Millicores as cores, exactly: 2000 -> "2", 1500 -> "1.5", 250 -> "0.25".
std::string FormatCores(int64_t millis);

/// Seconds the job has run: now - start for RUNNING/COMPLETING, end - start once finished, 0 for
/// jobs that never started (PENDING shows 0:00 like squeue).
int64_t ElapsedSeconds(const v1::JobInfo& job, int64_t now);

/// Distinct node names of the job's placement, in rank order.
std::vector<std::string> JobNodes(const v1::JobInfo& job);

/// The mlq --json object of a job. Keys (snake_case; times in Unix seconds, 0 = not set; sizes in
/// bytes and millicores): job_id, name, user, uid, account, partition, qos, state, state_code,
/// reason, tasks, nodes (array), nodelist, submit_time, start_time, end_time, elapsed, time_limit,
/// exit_code, attempt, requeue_count, priority, expected_start, cpu_millis_per_task,
/// memory_bytes_per_task, gpus_per_task, gpu_types, workdir, hold, nice, topology.
nlohmann::json JobJson(const v1::JobInfo& job, int64_t now);

/// mlq --json: one array, one job object per line (JsonText: valid JSON whatever bytes schedd
/// sent), in the given order; "[]\n" when empty. Built one object at a time, never as one tree.
std::string FormatJobsJson(const std::vector<const v1::JobInfo*>& jobs, int64_t now);

}  // namespace mlsched::cli
