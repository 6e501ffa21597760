// Fuzz target: the simulator's trace readers (schedd/sim): SWF (Parallel Workloads Archive),
// Philly CSV, Pollux workload CSV, and the Alibaba GPU 2023 pod and node lists. Traces are
// downloaded from the internet, so every byte is untrusted. The first line picks the reader
// ("swf", "philly", "pollux", "alibaba" or "alibaba-nodes"); the rest is the file, written to a
// scratch file because the readers take a path (plain or gzip: zlib reads both).
// Properties: no crash or UB; the only exception is TraceError; jobs have sane shapes.
#include "fuzz/fuzz_util.h"
#include "schedd/sim/gpu_readers.h"
#include "schedd/sim/swf_reader.h"

namespace sim = mlsched::sim;

namespace {

// A small valid node list for the Alibaba pod reader.
constexpr std::string_view kNodes =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "node-0,32000,262144,0,\n"
    "node-1,96000,786432,8,V100M32\n";

void CheckTrace(const sim::Trace& trace) {
  for (const sim::TraceJob& job : trace.jobs) {
    FUZZ_CHECK(job.submit_time >= 0);  // rebased by FinalizeTrace
    FUZZ_CHECK(job.run_time >= 0);
    FUZZ_CHECK(job.spec.ntasks >= 1);
    FUZZ_CHECK(job.spec.per_task.cpu_millis >= 0);
    FUZZ_CHECK(job.spec.per_task.memory_bytes >= 0);
  }
  for (const auto& node : trace.nodes) {
    FUZZ_CHECK(node.capacity.cpu_millis >= 0);
    FUZZ_CHECK(node.capacity.memory_bytes >= 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mlsched::fuzz::ScratchFile file("trace"), nodes("nodes");
  static const std::string& nodes_path = nodes.Write(kNodes);
  const std::string input = mlsched::fuzz::Text(data, size);
  const size_t nl = input.find('\n');
  if (nl == std::string::npos) return 0;
  const std::string format = input.substr(0, nl);
  const std::string& path = file.Write(std::string_view(input).substr(nl + 1));
  sim::ReaderOptions options;
  options.max_issues_kept = 4;
  try {
    if (format == "swf") {
      CheckTrace(sim::ReadSwf(path, options));
    } else if (format == "philly") {
      CheckTrace(sim::ReadPhilly(path, options));
    } else if (format == "pollux") {
      CheckTrace(sim::ReadPollux(path, options, {{"cifar10", 3600}, {"bert", 600}, {"ncf", 0}}));
    } else if (format == "alibaba") {
      CheckTrace(sim::ReadAlibaba(path, nodes_path, options));
    } else if (format == "alibaba-nodes") {
      for (const auto& node : sim::ReadAlibabaNodes(path)) FUZZ_CHECK(node.capacity.memory_bytes >= 0);
    }
  } catch (const sim::TraceError&) {
  }
  return 0;
}
