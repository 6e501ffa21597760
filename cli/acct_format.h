// mlacct's output (sacct and seff for mlsched): job accounting fields named as sacct names them
// where it has them (JobID, JobName, User, Account, Partition, State, ExitCode, Submit, Start, End,
// Elapsed, NTasks, AllocCPUS, AllocTRES, ReqMem, TotalCPU, MaxRSS), plus mlsched's (CPUEff, MemEff,
// GPUs, GPUHours, GPUBusyHours, GPUHoursIdle, GPUUtil, EnergyKWh, OOMKills, Attempts); and the
// efficiency report of `mlacct --efficiency JOB` (seff's figures and a one-line verdict). Pure
// functions of v1::JobInfo (with its usage, JobInfo.usage) and the current time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/requests.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// The fields `mlacct` prints without --format.
inline constexpr const char* kDefaultAcctFields =
    "JobID,JobName,User,Account,State,ExitCode,Elapsed,AllocTRES,TotalCPU,CPUEff,MaxRSS,GPUUtil";

/// The known field names, in their canonical spelling (for --helpformat and errors).
const std::vector<std::string>& AcctFieldNames();

/// Parses a comma list of field names (case-insensitive, sacct's) into canonical names. Error:
/// "unknown field 'X' (known: JobID, ...)"; an empty list is an error too.
Parsed<std::vector<std::string>> ParseAcctFields(const std::string& text);

/// Seconds the job's attempts ran: the ended ones (usage.wall_seconds) plus the running one's
/// now - start_time; without usage, the last attempt's elapsed time.
int64_t AcctWallSeconds(const v1::JobInfo& job, int64_t now);

/// One field of one job, as text ("" when unknown, as sacct leaves it blank).
std::string AcctField(const std::string& field, const v1::JobInfo& job, int64_t now);

/// The table: a header and a dashed line (unless `noheader`), columns padded to their widest
/// value; with `parsable2` fields joined by '|' and nothing padded (sacct -P).
std::string FormatAcctTable(const std::vector<std::string>& fields, const std::vector<const v1::JobInfo*>& jobs,
                            int64_t now, bool parsable2, bool noheader);

/// A JSON object of the fields (numbers where the field is a number; null when unknown).
nlohmann::json AcctJson(const std::vector<std::string>& fields, const v1::JobInfo& job, int64_t now);

/// seff's report of one job: its state, cores, CPU utilized and efficiency, memory utilized and
/// efficiency, GPU-hours allocated and busy and efficiency, then "Verdict: ..." (a GPU job below
/// 10 % busy over an hour or more: "consider a smaller allocation or fixing the data loader"; CPU
/// below 25 %: fewer cores; memory below 25 % of the request: a smaller --mem-per-task; OOM kills:
/// a larger one). Figures nothing measured are "unknown".
std::string FormatEfficiency(const v1::JobInfo& job, int64_t now);

}  // namespace mlsched::cli
