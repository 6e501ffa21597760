// Alibaba cluster-trace-gpu-v2023 pod list (declared in gpu_readers.h).
#include <algorithm>
#include <cctype>
#include <filesystem>

#include "schedd/sim/gpu_readers.h"
#include "schedd/sim/line_reader.h"

namespace mlsched::sim {
namespace {

std::string LowerCopy(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string DefaultNodeList(const std::string& pod_list) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(pod_list).parent_path();
  for (const char* name : {"openb_node_list_all_node.csv", "openb_node_list_all_node.csv.gz",
                           "openb_node_list_gpu_node.csv", "openb_node_list_gpu_node.csv.gz"}) {
    if (fs::exists(dir / name)) return (dir / name).string();
  }
  throw TraceError(pod_list + ": no node list given and none found beside it "
                              "(openb_node_list_all_node.csv)");
}

constexpr std::string_view kPodHeader =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time";

/// Maps one pod record; returns an error message or "".
std::string MapPod(const std::vector<std::string_view>& f, TraceJob& job) {
  if (f.size() != 11) return "expected 11 fields, found " + std::to_string(f.size());
  int64_t cpu = 0, mem = 0, gpus = 0, gpu_milli = 0, created = 0, deleted = 0, scheduled = -1;
  if (!ParseInt(f[1], cpu) || cpu < 0) return "bad cpu_milli '" + std::string(f[1]) + "'";
  if (!ParseInt(f[2], mem) || mem < 0 || mem > kMaxTraceMemoryMib) return "bad memory_mib '" + std::string(f[2]) + "'";
  if (!ParseInt(f[3], gpus) || gpus < 0) return "bad num_gpu '" + std::string(f[3]) + "'";
  if (!ParseInt(f[4], gpu_milli) || gpu_milli < 0 || gpu_milli > 1000) {
    return "bad gpu_milli '" + std::string(f[4]) + "'";
  }
  if (!ParseInt(f[8], created) || created < 0) {
    return "bad creation_time '" + std::string(f[8]) + "'";
  }
  if (!ParseInt(f[9], deleted) || deleted < created) {
    return "bad deletion_time '" + std::string(f[9]) + "' (before creation?)";
  }
  if (!f[10].empty() && (!ParseInt(f[10], scheduled) || scheduled < created || scheduled > deleted)) {
    return "bad scheduled_time '" + std::string(f[10]) + "'";
  }
  if (gpus > 0 && gpu_milli == 0) return "num_gpu > 0 but gpu_milli is 0";
  job.submit_time = created;
  job.run_time = deleted - (scheduled >= 0 ? scheduled : created);
  job.requested_time = std::max<int64_t>(job.run_time, 1);
  job.spec.time_limit = job.requested_time;
  job.spec.name = std::string(f[0]);
  job.spec.qos = LowerCopy(f[6]);
  job.spec.account = job.spec.qos.empty() ? "default" : job.spec.qos;
  job.spec.user = job.spec.account;
  job.spec.ntasks = 1;
  job.spec.per_task.cpu_millis = cpu;
  job.spec.per_task.memory_bytes = mem << 20;
  job.size = gpus;
  job.accelerator = gpus > 0 ? "gpu" : "cpu";
  if (gpus > 0) {
    job.spec.per_task.gpus[""] = gpus;  // fractional (gpu_milli < 1000) -> one whole GPU
    if (!f[5].empty()) {
      for (auto type : SplitFields(f[5], '|')) {
        if (!type.empty()) job.spec.gpu_types.push_back(LowerCopy(type));
      }
    }
  }
  return "";
}

}  // namespace

Trace ReadAlibaba(const std::string& pod_list, const std::string& node_list,
                  const ReaderOptions& options) {
  Trace trace;
  trace.name = BaseName(pod_list);
  trace.format = "alibaba";
  trace.nodes = ReadAlibabaNodes(node_list.empty() ? DefaultNodeList(pod_list) : node_list);
  LineReader reader(pod_list);
  std::string line;
  if (!reader.Next(line) || line != kPodHeader) {
    throw TraceError(reader.Origin() + ": unexpected CSV header (want '" +
                     std::string(kPodHeader) + "')");
  }
  int64_t next_id = 1;
  while (reader.Next(line)) {
    if (line.empty()) continue;
    TraceJob job;
    std::string error = MapPod(SplitFields(line, ','), job);
    if (!error.empty()) {
      ReportIssue(trace, options, reader.Origin(), error);
      continue;
    }
    job.id = next_id++;
    job.origin = reader.Origin();
    trace.jobs.push_back(std::move(job));
  }
  FinalizeTrace(trace);
  return trace;
}

}  // namespace mlsched::sim
