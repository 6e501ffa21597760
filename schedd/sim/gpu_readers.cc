#include "schedd/sim/gpu_readers.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <filesystem>

#include "schedd/sim/line_reader.h"

namespace mlsched::sim {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Reads the header line and checks it names exactly `expected` columns in order.
void ExpectHeader(LineReader& reader, const std::vector<std::string_view>& expected) {
  std::string line;
  if (!reader.Next(line)) throw TraceError(reader.path() + ":1: empty file (no CSV header)");
  auto fields = SplitFields(line, ',');
  bool ok = fields.size() == expected.size();
  for (size_t i = 0; ok && i < fields.size(); ++i) ok = fields[i] == expected[i];
  if (!ok) {
    std::string want;
    for (auto e : expected) want += (want.empty() ? "" : ",") + std::string(e);
    throw TraceError(reader.Origin() + ": unexpected CSV header '" + line + "' (want '" + want +
                     "')");
  }
}

/// A gang of `gpus` one-GPU tasks.
void MakeGpuGang(TraceJob& job, int64_t gpus, const GpuTaskShape& shape) {
  job.spec.ntasks = static_cast<int32_t>(gpus);
  job.spec.per_task.cpu_millis = shape.cpu_millis_per_gpu;
  job.spec.per_task.memory_bytes = shape.memory_bytes_per_gpu;
  job.spec.per_task.gpus[""] = 1;
  job.size = gpus;
  job.accelerator = "gpu";
}

std::string MapPhilly(const std::vector<std::string_view>& f, const GpuTaskShape& shape,
                      TraceJob& job) {
  int64_t submit = 0, gpus = 0;
  double duration = 0;
  if (!ParseUtcTimestamp(f[0], submit)) return "bad timestamp '" + std::string(f[0]) + "'";
  if (!ParseDouble(f[1], duration) || !(duration >= 0) || duration > 1e12) {
    return "bad duration '" + std::string(f[1]) + "'";
  }
  if (!ParseInt(f[2], gpus) || gpus <= 0 || gpus > kMaxTraceGangGpus) {
    return "bad num_gpus '" + std::string(f[2]) + "' (want a positive integer)";
  }
  if (f[4].empty()) return "empty cluster id";
  job.submit_time = submit;
  job.run_time = std::llround(duration);
  job.requested_time = std::max<int64_t>(job.run_time, 1);
  job.spec.time_limit = job.requested_time;
  job.spec.account = "vc-" + std::string(f[4]);
  job.spec.user = job.spec.account;
  MakeGpuGang(job, gpus, shape);
  return "";
}

}  // namespace

bool ParseUtcTimestamp(std::string_view text, int64_t& out) {
  // "YYYY-MM-DD HH:MM:SS"
  if (text.size() != 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' ||
      text[13] != ':' || text[16] != ':') {
    return false;
  }
  int64_t y, mo, d, h, mi, s;
  if (!ParseInt(text.substr(0, 4), y) || !ParseInt(text.substr(5, 2), mo) ||
      !ParseInt(text.substr(8, 2), d) || !ParseInt(text.substr(11, 2), h) ||
      !ParseInt(text.substr(14, 2), mi) || !ParseInt(text.substr(17, 2), s)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return false;
  std::tm tm{};
  tm.tm_year = static_cast<int>(y - 1900);
  tm.tm_mon = static_cast<int>(mo - 1);
  tm.tm_mday = static_cast<int>(d);
  tm.tm_hour = static_cast<int>(h);
  tm.tm_min = static_cast<int>(mi);
  tm.tm_sec = static_cast<int>(s);
  out = static_cast<int64_t>(timegm(&tm));
  return true;
}

Trace ReadPhilly(const std::string& path, const ReaderOptions& options,
                 const GpuTaskShape& shape) {
  Trace trace;
  trace.name = BaseName(path);
  trace.format = "philly";
  LineReader reader(path);
  ExpectHeader(reader, {"timestamp", "duration", "num_gpus", "gpu_time", "cluster"});
  std::string line;
  int64_t next_id = 1;
  while (reader.Next(line)) {
    if (line.empty()) continue;
    auto f = SplitFields(line, ',');
    TraceJob job;
    std::string error = f.size() == 5 ? MapPhilly(f, shape, job)
                                      : "expected 5 fields, found " + std::to_string(f.size());
    if (!error.empty()) {
      ReportIssue(trace, options, reader.Origin(), error);
      continue;
    }
    job.id = next_id++;
    job.spec.name = "philly-" + std::to_string(job.id);
    job.origin = reader.Origin();
    trace.jobs.push_back(std::move(job));
  }
  FinalizeTrace(trace);
  return trace;
}

Trace ReadPollux(const std::string& path, const ReaderOptions& options,
                 const std::map<std::string, int64_t>& runtime_by_application,
                 const GpuTaskShape& shape) {
  if (runtime_by_application.empty()) {
    throw TraceError(path + ": Pollux workloads carry no job durations; give a run time (seconds) "
                            "per application (mlsim --app-runtimes FILE.toml)");
  }
  Trace trace;
  trace.name = BaseName(path);
  trace.format = "pollux";
  LineReader reader(path);
  ExpectHeader(reader, {"name", "time", "application", "num_replicas", "batch_size"});
  std::string line;
  int64_t next_id = 1;
  while (reader.Next(line)) {
    if (line.empty()) continue;
    auto f = SplitFields(line, ',');
    std::string error;
    int64_t time = 0, replicas = 0, batch = 0;
    if (f.size() != 5) {
      error = "expected 5 fields, found " + std::to_string(f.size());
    } else if (!ParseInt(f[1], time) || time < 0) {
      error = "bad time '" + std::string(f[1]) + "'";
    } else if (!ParseInt(f[3], replicas) || replicas <= 0 || replicas > kMaxTraceGangGpus) {
      error = "bad num_replicas '" + std::string(f[3]) + "'";
    } else if (!ParseInt(f[4], batch) || batch <= 0) {
      error = "bad batch_size '" + std::string(f[4]) + "'";
    } else if (!runtime_by_application.count(std::string(f[2]))) {
      error = "no run time given for application '" + std::string(f[2]) + "'";
    }
    if (!error.empty()) {
      ReportIssue(trace, options, reader.Origin(), error);
      continue;
    }
    TraceJob job;
    job.id = next_id++;
    job.submit_time = time;
    job.run_time = runtime_by_application.at(std::string(f[2]));
    job.requested_time = std::max<int64_t>(job.run_time, 1);
    job.spec.time_limit = job.requested_time;
    job.spec.name = std::string(f[0]);
    job.spec.account = std::string(f[2]);
    job.spec.user = job.spec.account;
    MakeGpuGang(job, replicas, shape);
    job.origin = reader.Origin();
    trace.jobs.push_back(std::move(job));
  }
  FinalizeTrace(trace);
  return trace;
}

std::vector<core::Node> ReadAlibabaNodes(const std::string& path) {
  LineReader reader(path);
  ExpectHeader(reader, {"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  std::vector<core::Node> nodes;
  std::string line;
  while (reader.Next(line)) {
    if (line.empty()) continue;
    auto f = SplitFields(line, ',');
    int64_t cpu = 0, mem = 0, gpu = 0;
    if (f.size() != 5 || f[0].empty() || !ParseInt(f[1], cpu) || cpu <= 0 ||
        !ParseInt(f[2], mem) || mem < 0 || mem > kMaxTraceMemoryMib || !ParseInt(f[3], gpu) || gpu < 0 ||
        (gpu > 0 && f[4].empty())) {
      throw TraceError(reader.Origin() + ": malformed node record '" + line + "'");
    }
    core::Node node;
    node.name = std::string(f[0]);
    node.capacity.cpu_millis = cpu;
    node.capacity.memory_bytes = mem << 20;
    if (gpu > 0) node.capacity.gpus[Lower(f[4])] = gpu;
    nodes.push_back(std::move(node));
  }
  if (nodes.empty()) throw TraceError(path + ": no nodes");
  return nodes;
}

}  // namespace mlsched::sim
