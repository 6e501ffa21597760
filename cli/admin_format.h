// How mladmin shows nodes (table and JSON), a single job in full (scontrol show job style) and the
// high-availability state (mladmin ha status).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "mlsched/v1/admin.pb.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// "on-demand", "spot", "reserved" or "unknown".
std::string PoolName(v1::Pool pool);

/// Allocated/total per GPU type: "h100:2/8", several types joined by ','; "0/0" without GPUs.
std::string GpuUsage(const v1::Resources& allocated, const v1::Resources& capacity);

/// The node table: NODE POOL STATE CPUS(A/T) MEM GPUS(A/T) DOMAIN ZONE REGION ISOLATION REASON, one
/// line per node sorted by name, columns left-aligned and separated by two spaces. CPUs in cores
/// (fractions shown: "1.5/8"), MEM as allocated/total ("4G/64G"), ISOLATION as the agent registered
/// it ("v1:memory,cpu,pids,devices,freezer", "none", "off"; "-" from an agent that did not say).
/// Every cell is escaped for the terminal (common/safe_text.h); widths count characters.
std::string FormatNodeTable(const std::vector<v1::NodeInfo>& nodes);

/// A node as JSON: name, pool, state, reason, region, zone, domain, address, isolation,
/// agent_version (its agentd's at registration), container_runtime, image_cache_bytes,
/// image_cache_images, rejected_reports, cutoff_timeout_s (its agent's --cutoff-timeout, 0 = never), cpu_millis,
/// cpu_millis_allocated, memory_bytes, memory_bytes_allocated, gpus ([{type, count, allocated}]),
/// last_heartbeat (Unix seconds), running_jobs.
nlohmann::json NodeJson(const v1::NodeInfo& node);

/// Every field of a job as scontrol show job prints it: "Key=Value" pairs, a few per line,
/// continuation lines indented by three spaces; the script (if any) at the end. A job without
/// argv and script is another user's job redacted by schedd: Command and Environment say hidden.
/// Every value is escaped for the terminal (common/safe_text.h); the script keeps its newlines and
/// tabs only (TextStyle::kMultiline).
std::string FormatJobDetail(const v1::JobInfo& job, int64_t now);

/// Every field of a job as JSON: JobJson's keys plus gid, argv, script, env, stdout, stderr and
/// placement ([{rank, node, local_rank, gpu_indices}]).
nlohmann::json JobDetailJson(const v1::JobInfo& job, int64_t now);

/// mladmin ha status: "Key: value" lines, values aligned (Mode, Leader - when empty: "none
/// (election in progress)" in etcd mode, else "-" -, Epoch, Answered by, Etcd endpoints - comma-joined, "-" when none -, Revision, Fenced
/// writes), then, when the response lists replicas, a blank line and the table
/// ADDRESS ROLE REVISION LAG sorted by address. Values are escaped for the terminal.
std::string FormatHaStatus(const v1::HaStatusResponse& resp);

/// The HA state as JSON: mode, leader, epoch, answered_by, etcd_endpoints, revision,
/// fenced_writes, members ([{address, role, revision, lag}], sorted by address).
nlohmann::json HaStatusJson(const v1::HaStatusResponse& resp);

}  // namespace mlsched::cli
