#include "cli/acct_format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <map>

#include "cli/job_format.h"
#include "cli/job_states.h"
#include "common/safe_text.h"
#include "common/units.h"

namespace mlsched::cli {

namespace {

std::string Printf(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool HasUsage(const v1::JobInfo& j) { return j.has_usage() && j.usage().ranks() > 0; }
bool Running(const v1::JobInfo& j) { return j.state() == v1::RUNNING; }

// Allocated cores of the whole gang (its task count x cores per task).
double AllocCores(const v1::JobInfo& j) {
  const int tasks = j.tasks_size() > 0 ? j.tasks_size() : std::max(1, j.spec().ntasks());
  return tasks * static_cast<double>(j.spec().cpu_millis_per_task()) / 1000.0;
}
int64_t AllocGpus(const v1::JobInfo& j) {
  const int tasks = j.tasks_size() > 0 ? j.tasks_size() : std::max(1, j.spec().ntasks());
  return static_cast<int64_t>(tasks) * j.spec().gpus_per_task();
}
int64_t ReqMemory(const v1::JobInfo& j) {
  const int tasks = j.tasks_size() > 0 ? j.tasks_size() : std::max(1, j.spec().ntasks());
  return static_cast<int64_t>(tasks) * j.spec().memory_bytes_per_task();
}
// CPU seconds used, or < 0 when unknown.
double CpuSeconds(const v1::JobInfo& j) {
  return HasUsage(j) && j.usage().cpu_usec() >= 0 ? static_cast<double>(j.usage().cpu_usec()) / 1e6 : -1;
}
// Used / allocated CPU, percent; < 0 when unknown.
double CpuEff(const v1::JobInfo& j, int64_t now) {
  const double used = CpuSeconds(j), alloc = AllocCores(j) * static_cast<double>(AcctWallSeconds(j, now));
  return used >= 0 && alloc > 0 ? 100.0 * used / alloc : -1;
}
// MaxRSS of the largest rank / the per-task request, percent; < 0 when unknown.
double MemEff(const v1::JobInfo& j) {
  if (!HasUsage(j) || j.usage().max_rss_bytes() < 0 || j.spec().memory_bytes_per_task() <= 0) return -1;
  return 100.0 * static_cast<double>(j.usage().max_rss_bytes()) / static_cast<double>(j.spec().memory_bytes_per_task());
}
// Busy / sampled GPU-seconds, percent; < 0 when unknown.
double GpuUtil(const v1::JobInfo& j) {
  return HasUsage(j) && j.usage().gpu_seconds() > 0 ? 100.0 * j.usage().gpu_busy_seconds() / j.usage().gpu_seconds() : -1;
}
// sacct's TotalCPU: [D-]HH:MM:SS or MM:SS.mmm.
std::string CpuTime(double seconds) {
  if (seconds < 0) return "";
  if (seconds < 3600) {
    const int m = static_cast<int>(seconds / 60);
    return Printf("%02.0f:", m) + Printf("%06.3f", seconds - 60 * m);
  }
  return FormatDuration(static_cast<int64_t>(seconds));
}
std::string Bytes(int64_t b) { return b < 0 ? "" : FormatBytes(b); }
std::string Percent(double p) { return p < 0 ? "" : Printf("%.1f%%", p); }
std::string Time(int64_t t) { return t <= 0 ? "Unknown" : FormatTimestamp(t); }

using Getter = std::function<std::string(const v1::JobInfo&, int64_t)>;

const std::vector<std::pair<std::string, Getter>>& Fields() {
  static const std::vector<std::pair<std::string, Getter>> fields = {
      {"JobID", [](const v1::JobInfo& j, int64_t) { return JobIdText(j); }},
      {"JobName", [](const v1::JobInfo& j, int64_t) { return SafeText(j.spec().name()); }},
      {"User", [](const v1::JobInfo& j, int64_t) { return SafeText(j.user()); }},
      {"Account", [](const v1::JobInfo& j, int64_t) { return SafeText(j.spec().account()); }},
      {"Partition", [](const v1::JobInfo& j, int64_t) { return SafeText(j.spec().partition()); }},
      {"State", [](const v1::JobInfo& j, int64_t) { return StateName(j.state()); }},
      {"ExitCode", [](const v1::JobInfo& j, int64_t) {
         // sacct's EXIT:SIGNAL: 128+N exits are the signal N.
         const int c = j.exit_code();
         return c > 128 && c < 128 + 65 ? "0:" + std::to_string(c - 128) : std::to_string(c) + ":0";
       }},
      {"Submit", [](const v1::JobInfo& j, int64_t) { return Time(j.submit_time()); }},
      {"Start", [](const v1::JobInfo& j, int64_t) { return Time(j.start_time()); }},
      {"End", [](const v1::JobInfo& j, int64_t) { return j.end_time() > 0 ? FormatTimestamp(j.end_time()) : "Unknown"; }},
      {"Elapsed", [](const v1::JobInfo& j, int64_t now) { return FormatDuration(AcctWallSeconds(j, now)); }},
      {"NTasks", [](const v1::JobInfo& j, int64_t) { return std::to_string(j.tasks_size() > 0 ? j.tasks_size() : j.spec().ntasks()); }},
      {"AllocCPUS", [](const v1::JobInfo& j, int64_t) { return Printf("%g", AllocCores(j)); }},
      {"AllocTRES", [](const v1::JobInfo& j, int64_t) {
         std::string t = "cpu=" + Printf("%g", AllocCores(j));
         if (ReqMemory(j) > 0) t += ",mem=" + FormatBytes(ReqMemory(j));
         if (AllocGpus(j) > 0) t += ",gres/gpu=" + std::to_string(AllocGpus(j));
         return t;
       }},
      {"ReqMem", [](const v1::JobInfo& j, int64_t) { return ReqMemory(j) > 0 ? FormatBytes(ReqMemory(j)) : ""; }},
      {"TotalCPU", [](const v1::JobInfo& j, int64_t) { return CpuTime(CpuSeconds(j)); }},
      {"CPUEff", [](const v1::JobInfo& j, int64_t now) { return Percent(CpuEff(j, now)); }},
      {"MaxRSS", [](const v1::JobInfo& j, int64_t) { return HasUsage(j) ? Bytes(j.usage().max_rss_bytes()) : ""; }},
      {"MemEff", [](const v1::JobInfo& j, int64_t) { return Percent(MemEff(j)); }},
      {"GPUs", [](const v1::JobInfo& j, int64_t) { return std::to_string(AllocGpus(j)); }},
      {"GPUHours", [](const v1::JobInfo& j, int64_t) { return HasUsage(j) ? Printf("%.2f", j.usage().gpu_seconds() / 3600) : ""; }},
      {"GPUBusyHours", [](const v1::JobInfo& j, int64_t) { return HasUsage(j) ? Printf("%.2f", j.usage().gpu_busy_seconds() / 3600) : ""; }},
      {"GPUHoursIdle", [](const v1::JobInfo& j, int64_t) {
         return HasUsage(j) ? Printf("%.2f", (j.usage().gpu_seconds() - j.usage().gpu_busy_seconds()) / 3600) : "";
       }},
      {"GPUUtil", [](const v1::JobInfo& j, int64_t) { return Percent(GpuUtil(j)); }},
      {"MaxGPUUtil", [](const v1::JobInfo& j, int64_t) {
         return HasUsage(j) && j.usage().gpu_seconds() > 0 ? std::to_string(j.usage().gpu_util_max_percent()) + "%" : "";
       }},
      {"MaxGPUMem", [](const v1::JobInfo& j, int64_t) {
         return HasUsage(j) && j.usage().gpu_memory_max_bytes() > 0 ? FormatBytes(j.usage().gpu_memory_max_bytes()) : "";
       }},
      {"EnergyKWh", [](const v1::JobInfo& j, int64_t) { return HasUsage(j) ? Printf("%.3f", j.usage().gpu_energy_joules() / 3.6e6) : ""; }},
      {"OOMKills", [](const v1::JobInfo& j, int64_t) { return HasUsage(j) ? std::to_string(j.usage().oom_kills()) : ""; }},
      {"Attempts", [](const v1::JobInfo& j, int64_t) { return std::to_string(j.attempt()); }},
      {"Preemptions", [](const v1::JobInfo& j, int64_t) { return std::to_string(j.preempt_count()); }},
      {"Evictions", [](const v1::JobInfo& j, int64_t) { return std::to_string(j.evictions()); }},
      {"LostWork", [](const v1::JobInfo& j, int64_t) {
         return j.has_usage() && j.usage().lost_work_seconds() > 0 ? FormatDuration(j.usage().lost_work_seconds()) : "0:00";
       }},
      {"Cost", [](const v1::JobInfo& j, int64_t) { return j.has_usage() ? Printf("%.2f", j.usage().cost()) : ""; }},
  };
  return fields;
}

const Getter* Find(const std::string& name) {
  for (const auto& [n, g] : Fields())
    if (n == name) return &g;
  return nullptr;
}

// The fields whose JSON value is a number (the others are strings).
bool Numeric(const std::string& f) {
  static const char* const kNumbers[] = {"NTasks", "AllocCPUS", "GPUs", "Attempts", "OOMKills", "GPUHours", "GPUBusyHours",
                                         "GPUHoursIdle", "EnergyKWh"};
  return std::find(std::begin(kNumbers), std::end(kNumbers), f) != std::end(kNumbers);
}

}  // namespace

const std::vector<std::string>& AcctFieldNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [name, g] : Fields()) n.push_back(name);
    return n;
  }();
  return names;
}

Parsed<std::vector<std::string>> ParseAcctFields(const std::string& text) {
  Parsed<std::vector<std::string>> out;
  std::vector<std::string> fields;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string word = text.substr(pos, comma - pos);
    pos = comma + 1;
    if (word.empty()) continue;
    std::string canonical;
    for (const auto& n : AcctFieldNames())
      if (Lower(n) == Lower(word)) canonical = n;
    if (canonical.empty()) {
      std::string known;
      for (const auto& n : AcctFieldNames()) known += (known.empty() ? "" : ", ") + n;
      out.error = "unknown field '" + SafeText(word.substr(0, 64)) + "' (known: " + known + ")";
      return out;
    }
    fields.push_back(canonical);
  }
  if (fields.empty()) {
    out.error = "no fields";
    return out;
  }
  out.value = std::move(fields);
  return out;
}

int64_t AcctWallSeconds(const v1::JobInfo& job, int64_t now) {
  const int64_t running = Running(job) && job.start_time() > 0 ? std::max<int64_t>(0, now - job.start_time()) : 0;
  if (HasUsage(job)) return job.usage().wall_seconds() + running;
  return ElapsedSeconds(job, now);
}

std::string AcctField(const std::string& field, const v1::JobInfo& job, int64_t now) {
  const Getter* g = Find(field);
  return g ? (*g)(job, now) : "";
}

std::string FormatAcctTable(const std::vector<std::string>& fields, const std::vector<const v1::JobInfo*>& jobs,
                            int64_t now, bool parsable2, bool noheader) {
  std::vector<std::vector<std::string>> rows;
  if (!noheader) rows.push_back(fields);
  for (const auto* j : jobs) {
    std::vector<std::string> row;
    for (const auto& f : fields) row.push_back(AcctField(f, *j, now));
    rows.push_back(std::move(row));
  }
  std::string out;
  if (parsable2) {
    for (const auto& row : rows) {
      for (size_t i = 0; i < row.size(); ++i) out += (i ? "|" : "") + row[i];
      out += "\n";
    }
    return out;
  }
  std::vector<size_t> width(fields.size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (size_t i = 0; i < row.size(); ++i) l += (i ? " " : "") + row[i] + std::string(width[i] - row[i].size(), ' ');
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  size_t r = 0;
  if (!noheader) {
    line(rows[r++]);
    std::vector<std::string> dashes;
    for (size_t w : width) dashes.push_back(std::string(w, '-'));
    line(dashes);
  }
  for (; r < rows.size(); ++r) line(rows[r]);
  return out;
}

nlohmann::json AcctJson(const std::vector<std::string>& fields, const v1::JobInfo& job, int64_t now) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& f : fields) {
    const std::string v = AcctField(f, job, now);
    if (v.empty()) o[f] = nullptr;
    else if (Numeric(f)) o[f] = std::stod(v);
    else o[f] = v;
  }
  return o;
}

std::string FormatEfficiency(const v1::JobInfo& j, int64_t now) {
  std::string out;
  auto line = [&](const std::string& k, const std::string& v) { out += k + ": " + v + "\n"; };
  const int64_t wall = AcctWallSeconds(j, now);
  line("Job ID", JobIdText(j));
  line("User/Account", SafeText(j.user()) + "/" + SafeText(j.spec().account().empty() ? "default" : j.spec().account()));
  line("State", StateName(j.state()) + " (exit code " + std::to_string(j.exit_code()) + ")");
  line("Attempts", std::to_string(j.attempt()));
  line("Tasks", std::to_string(j.tasks_size() > 0 ? j.tasks_size() : j.spec().ntasks()) + ", " +
                    Printf("%g", AllocCores(j)) + " core(s) in all");
  line("Wall-clock time", FormatDuration(wall) + (j.attempt() > 1 ? " (all attempts)" : ""));
  const double cpu = CpuSeconds(j), cpu_eff = CpuEff(j, now);
  line("CPU Utilized", cpu < 0 ? "unknown" : CpuTime(cpu));
  line("CPU Efficiency", cpu_eff < 0 ? "unknown" : Percent(cpu_eff) + " of " + FormatDuration(static_cast<int64_t>(AllocCores(j) * wall)) +
                                                       " core-walltime");
  const double mem_eff = MemEff(j);
  line("Memory Utilized", HasUsage(j) && j.usage().max_rss_bytes() >= 0 ? FormatBytes(j.usage().max_rss_bytes()) + " (largest task)" : "unknown");
  line("Memory Efficiency", mem_eff < 0 ? (j.spec().memory_bytes_per_task() > 0 ? "unknown" : "no memory requested")
                                        : Percent(mem_eff) + " of " + FormatBytes(j.spec().memory_bytes_per_task()) + " per task");
  const double util = GpuUtil(j);
  if (AllocGpus(j) > 0) {
    line("GPUs", std::to_string(AllocGpus(j)));
    line("GPU Efficiency", util < 0 ? "unknown (no NVML samples)"
                                    : Percent(util) + " busy over " + Printf("%.2f", j.usage().gpu_seconds() / 3600) +
                                          " GPU-hours (" + Printf("%.2f", (j.usage().gpu_seconds() - j.usage().gpu_busy_seconds()) / 3600) +
                                          " idle)");
    if (HasUsage(j) && j.usage().gpu_seconds() > 0)
      line("GPU Peaks", std::to_string(j.usage().gpu_util_max_percent()) + " % utilization" +
                            (j.usage().gpu_memory_max_bytes() > 0 ? ", " + FormatBytes(j.usage().gpu_memory_max_bytes()) +
                                                                        " GPU memory (largest task)"
                                                                  : ""));
    if (HasUsage(j) && j.usage().gpu_energy_joules() > 0) line("GPU Energy", Printf("%.3f kWh", j.usage().gpu_energy_joules() / 3.6e6));
  }
  // The verdict: the largest waste first.
  std::string verdict;
  if (HasUsage(j) && j.usage().oom_kills() > 0) {
    verdict = "the kernel's OOM killer ended " + std::to_string(j.usage().oom_kills()) +
              " process(es): ask for more --mem-per-task";
  } else if (util >= 0 && util < 10 && j.usage().gpu_seconds() >= 3600) {
    verdict = "GPU " + Printf("%.0f", util) + " % busy over " + Printf("%.1f", j.usage().gpu_seconds() / 3600) +
              " GPU-hours: consider a smaller allocation or fixing the data loader";
  } else if (cpu_eff >= 0 && cpu_eff < 25 && wall >= 600 && AllocCores(j) > 1) {
    verdict = "CPU " + Printf("%.0f", cpu_eff) + " % used: ask for fewer --cpus-per-task";
  } else if (mem_eff >= 0 && mem_eff < 25 && wall >= 600) {
    verdict = "memory " + Printf("%.0f", mem_eff) + " % used: ask for a smaller --mem-per-task";
  } else if (!HasUsage(j)) {
    verdict = "nothing measured (no agent reported this job's usage)";
  } else {
    verdict = "no waste found";
  }
  line("Verdict", verdict);
  return out;
}

}  // namespace mlsched::cli
