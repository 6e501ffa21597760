#include "schedd/sim/swf_reader.h"

#include <algorithm>

#include "schedd/sim/line_reader.h"

namespace mlsched::sim {
namespace {

constexpr size_t kSwfFields = 18;

/// Parses "; Key: value" header lines for MaxProcs / MaxNodes; returns the value or -1.
int64_t HeaderValue(std::string_view line, std::string_view key) {
  size_t pos = line.find(key);
  if (pos == std::string_view::npos) return -1;
  std::string_view rest = line.substr(pos + key.size());
  size_t colon = rest.find(':');
  if (colon == std::string_view::npos) return -1;
  auto fields = SplitBlanks(rest.substr(colon + 1));
  int64_t value = -1;
  if (fields.empty() || !ParseInt(fields[0], value)) return -1;
  return value;
}

std::string IdName(const char* prefix, int64_t id) {
  return id < 0 ? std::string("unknown") : prefix + std::to_string(id);
}

/// Fills `job` from the 18 numeric fields; returns an error message or "".
std::string MapRecord(const int64_t f[kSwfFields], int64_t machine_procs, TraceJob& job) {
  const int64_t id = f[0], submit = f[1], run = f[3], allocated = f[4], requested = f[7],
                req_time = f[8], uid = f[11], gid = f[12];
  if (id < 0) return "negative job id";
  if (submit < 0) return "unknown submit time (field 2)";
  if (run < 0) return "unknown run time (field 4)";
  const int64_t size = requested > 0 ? requested : allocated;
  if (size <= 0) return "no processor count (fields 8 and 5 are both <= 0)";
  if (size > kMaxSwfProcessors) return "job size " + std::to_string(size) + " is above the limit of " + std::to_string(kMaxSwfProcessors);
  if (machine_procs > 0 && size > machine_procs) {
    return "job needs " + std::to_string(size) + " processors but the machine has " +
           std::to_string(machine_procs);
  }
  const int64_t limit = req_time > 0 ? req_time : std::max<int64_t>(run, 1);
  job.id = id;
  job.submit_time = submit;
  job.run_time = std::min(run, limit);
  job.hits_time_limit = req_time > 0 && run >= req_time;
  job.requested_time = limit;
  job.size = size;
  job.accelerator = "cpu";
  job.spec.name = "swf-" + std::to_string(id);
  job.spec.user = IdName("u", uid);
  job.spec.account = gid >= 0 ? IdName("g", gid) : job.spec.user;
  job.spec.ntasks = 1;
  job.spec.per_task.cpu_millis = size * 1000;
  job.spec.time_limit = limit;
  return "";
}

}  // namespace

Trace ReadSwf(const std::string& path, const ReaderOptions& options, const SwfOptions& swf) {
  Trace trace;
  trace.name = BaseName(path);
  trace.format = "swf";
  LineReader reader(path);
  int64_t max_procs = -1, max_nodes = -1;
  std::string line;
  while (reader.Next(line)) {
    std::string_view view(line);
    size_t first = view.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    if (view[first] == ';') {
      if (int64_t v = HeaderValue(view, "MaxProcs"); v > 0) max_procs = v;
      if (int64_t v = HeaderValue(view, "MaxNodes"); v > 0) max_nodes = v;
      continue;
    }
    const int64_t machine = swf.processors > 0 ? swf.processors
                            : max_procs > 0    ? max_procs
                                               : max_nodes;
    auto fields = SplitBlanks(view);
    if (fields.size() != kSwfFields) {
      ReportIssue(trace, options, reader.Origin(),
                  "expected 18 fields, found " + std::to_string(fields.size()));
      continue;
    }
    int64_t f[kSwfFields];
    std::string error;
    for (size_t i = 0; i < kSwfFields && error.empty(); ++i) {
      if (!ParseInt(fields[i], f[i])) {
        error = "field " + std::to_string(i + 1) + " is not an integer: '" +
                std::string(fields[i]) + "'";
      }
    }
    TraceJob job;
    if (error.empty()) error = MapRecord(f, machine, job);
    if (!error.empty()) {
      ReportIssue(trace, options, reader.Origin(), error);
      continue;
    }
    job.origin = reader.Origin();
    trace.jobs.push_back(std::move(job));
  }
  const int64_t machine = swf.processors > 0 ? swf.processors
                          : max_procs > 0    ? max_procs
                                             : max_nodes;
  if (machine <= 0) {
    throw TraceError(path + ": machine size unknown: no '; MaxProcs:' or '; MaxNodes:' header "
                            "(pass the processor count explicitly)");
  }
  if (machine > kMaxSwfProcessors) {
    throw TraceError(path + ": machine size " + std::to_string(machine) + " is above the limit of " +
                     std::to_string(kMaxSwfProcessors) + " processors");
  }
  core::Node node;
  node.name = "swf-0";
  node.capacity.cpu_millis = machine * 1000;
  node.capacity.memory_bytes = machine * (int64_t{1} << 30);  // memory is not modeled for SWF
  trace.nodes.push_back(std::move(node));
  FinalizeTrace(trace);
  return trace;
}

}  // namespace mlsched::sim
