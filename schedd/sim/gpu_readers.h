// Readers of GPU-cluster job lists: the Philly-derived CSV of the Pollux artifact, the Pollux
// workload samples and the Alibaba cluster-trace-gpu-v2023 pod and node lists. Mappings are
// documented in schedd/sim/README.md. None of these traces carries a user's runtime estimate, so
// the time limit is the actual run time ("exact run times") unless a predictor replaces it.
#pragma once

#include <map>
#include <string>

#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// Most GPUs (one-GPU tasks) one Philly or Pollux job may ask for; more is a malformed record
/// (a gang's task count is 32-bit).
inline constexpr int64_t kMaxTraceGangGpus = 1000000;
/// Largest memory_mib of an Alibaba node or pod (1 PiB); more is malformed, so that the byte
/// count (MiB << 20) cannot overflow.
inline constexpr int64_t kMaxTraceMemoryMib = int64_t{1} << 30;

/// Shape of the per-GPU task a GPU gang is made of.
struct GpuTaskShape {
  int64_t cpu_millis_per_gpu = 1000;  // millicores per task (one task per GPU)
  int64_t memory_bytes_per_gpu = 0;   // bytes per task
};

/// Philly CSV (timestamp,duration,num_gpus,gpu_time,cluster): a gang of num_gpus tasks of one GPU
/// each; account = "vc-" + cluster; submit = timestamp (UTC); run time = duration rounded.
/// Fleet: none (the caller supplies one). Throws TraceError on an unreadable file, a wrong header
/// or (strict) a malformed record.
Trace ReadPhilly(const std::string& path, const ReaderOptions& options,
                 const GpuTaskShape& shape = {});

/// Pollux workload CSV (name,time,application,num_replicas,batch_size): a gang of num_replicas
/// one-GPU tasks submitted at `time`; account = application. The file has no durations, so
/// `runtime_by_application` (seconds per application) must cover every application used; a
/// missing one is a malformed record. Throws TraceError when the table is empty.
Trace ReadPollux(const std::string& path, const ReaderOptions& options,
                 const std::map<std::string, int64_t>& runtime_by_application,
                 const GpuTaskShape& shape = {});

/// Alibaba GPU 2023 pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
/// creation_time,deletion_time,scheduled_time) with its node list (sn,cpu_milli,memory_mib,gpu,
/// model). One task per pod; fractional GPUs (gpu_milli < 1000) are rounded up to one whole GPU
/// because the core allocates whole devices; gpu_spec "A|B" -> acceptable GPU types; account =
/// qos class. Run time = deletion - scheduled (or - creation for never-scheduled pods).
/// `node_list` empty = openb_node_list_all_node.csv beside the pod list, else
/// openb_node_list_gpu_node.csv.
Trace ReadAlibaba(const std::string& pod_list, const std::string& node_list,
                  const ReaderOptions& options);

/// Reads an Alibaba-style node list (sn,cpu_milli,memory_mib,gpu,model) into nodes; GPU model
/// names are lower-cased ("V100M16" -> "v100m16"). Throws TraceError on any malformed line.
std::vector<core::Node> ReadAlibabaNodes(const std::string& path);

/// Parses "YYYY-MM-DD HH:MM:SS" (UTC) into seconds since the Unix epoch; false when malformed.
bool ParseUtcTimestamp(std::string_view text, int64_t& out);

}  // namespace mlsched::sim
