#include "cli/job_format.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "cli/job_states.h"
#include "cli/json_text.h"
#include "common/hostlist.h"
#include "common/safe_text.h"

namespace mlsched::cli {

namespace {

struct FieldDef {
  char code;
  const char* title;
};

constexpr std::array<FieldDef, 35> kFields{{
    {'i', "JOBID"},     {'j', "NAME"},        {'u', "USER"},        {'a', "ACCOUNT"},     {'P', "PARTITION"},
    {'q', "QOS"},       {'T', "STATE"},       {'t', "ST"},          {'M', "TIME"},        {'l', "TIME_LIMIT"},
    {'L', "TIME_LEFT"}, {'D', "NODES"},       {'A', "TASKS"},       {'C', "CPUS"},        {'m', "MIN_MEMORY"},
    {'b', "GPUS"},      {'R', "NODELIST(REASON)"}, {'N', "NODELIST"}, {'r', "REASON"},    {'S', "START_TIME"},
    {'V', "SUBMIT_TIME"}, {'e', "END_TIME"},  {'Q', "PRIORITY"},    {'Z', "WORK_DIR"},    {'y', "NICE"},
    {'o', "COMMAND"},   {'F', "ARRAY_JOB_ID"}, {'K', "ARRAY_TASK_ID"}, {'E', "DEPENDENCY"},
    {'g', "POOL"},      {'G', "ACCEL"},       {'w', "PREEMPT/EVICT"},
    {'I', "IMAGE"},     {'J', "DIGEST"},      {'X', "IDLE"},
}};

const FieldDef* FindField(char code) {
  for (const auto& f : kFields)
    if (f.code == code) return &f;
  return nullptr;
}

// What the job's running (or last) attempt used, for --json; null when nothing was reported.
nlohmann::json UsageJson(const v1::JobInfo& job) {
  if (!job.has_usage() || (job.usage().ranks() <= 0 && job.usage().cost() == 0 && job.usage().lost_work_seconds() == 0))
    return nullptr;
  const v1::JobUsage& u = job.usage();
  return {{"cpu_s", u.cpu_usec() >= 0 ? nlohmann::json(static_cast<double>(u.cpu_usec()) / 1e6) : nlohmann::json()},
          {"max_rss_bytes", u.max_rss_bytes() >= 0 ? nlohmann::json(u.max_rss_bytes()) : nlohmann::json()},
          {"gpu_s", u.gpu_seconds()},
          {"gpu_busy_s", u.gpu_busy_seconds()},
          {"gpu_util_percent", u.gpu_seconds() > 0 ? nlohmann::json(100.0 * u.gpu_busy_seconds() / u.gpu_seconds()) : nlohmann::json()},
          {"gpu_energy_j", u.gpu_energy_joules()},
          {"gpu_util_max_percent", u.gpu_seconds() > 0 ? nlohmann::json(u.gpu_util_max_percent()) : nlohmann::json()},
          {"gpu_memory_max_bytes", u.gpu_memory_max_bytes() > 0 ? nlohmann::json(u.gpu_memory_max_bytes()) : nlohmann::json()},
          {"oom_kills", u.oom_kills()},
          {"lost_work_s", u.lost_work_seconds()},
          {"cost", u.cost()},
          {"ranks", u.ranks()}};
}

std::string Limit(int64_t seconds) { return seconds <= 0 ? "UNLIMITED" : FormatDuration(seconds); }

// Tasks the job runs with: its placement's size when it has one (an elastic gang may run below
// its MAX), else spec.ntasks.
int64_t Tasks(const v1::JobInfo& job) {
  return job.tasks().empty() ? job.spec().ntasks() : job.tasks_size();
}

// TASKS column: "4" for a rigid gang; "3/2-4" (running size / range) for an elastic one, "2-4"
// while it has no placement, ":STEP" appended when the step is not 1.
std::string TasksColumn(const v1::JobInfo& job) {
  const v1::JobSpec& s = job.spec();
  if (s.min_tasks() <= 0) return std::to_string(s.ntasks());
  std::string range = std::to_string(s.min_tasks()) + "-" + std::to_string(s.ntasks());
  if (s.task_step() > 1) range += ":" + std::to_string(s.task_step());
  return job.tasks().empty() ? range : std::to_string(job.tasks_size()) + "/" + range;
}

std::string Gpus(const v1::JobSpec& s) {
  if (s.gpus_per_task() == 0) return "N/A";
  std::string types;
  for (const auto& t : s.gpu_types()) types += (types.empty() ? "" : "|") + t;
  return "gpu:" + (types.empty() ? "" : types + ":") + std::to_string(s.gpus_per_task());
}

// argv joined; "(batch script)"; "N/A" when the answer carries neither (ListJobs summaries).
std::string Command(const v1::JobSpec& s) {
  if (s.argv().empty()) return s.script().empty() ? "N/A" : "(batch script)";
  std::string cmd;
  for (const auto& a : s.argv()) cmd += (cmd.empty() ? "" : " ") + a;
  return cmd;
}

// Appends the value `raw` (from schedd: hostile) escaped for the terminal (SafeText), padded or
// cut to the item's width in characters; a cut never splits a UTF-8 sequence.
void AppendFitted(std::string& out, const std::string& raw, const FormatItem& it) {
  const std::string escaped = IsSafeText(raw) ? std::string() : SafeText(raw);
  const std::string& v = escaped.empty() ? raw : escaped;
  if (it.width <= 0) {
    out += v;
    return;
  }
  const size_t w = static_cast<size_t>(it.width), n = std::min(Utf8Chars(v), w);
  if (it.right) out.append(w - n, ' ');
  out.append(v, 0, Utf8PrefixBytes(v, n));
  if (!it.right) out.append(w - n, ' ');
}

// Appends a line built by `field(code)` for each item, without trailing blanks. Literal text is the
// caller's own --format and is copied as is.
template <typename F>
void AppendLine(std::string& out, const std::vector<FormatItem>& items, F&& field) {
  size_t start = out.size();
  for (const auto& it : items) {
    if (it.code) AppendFitted(out, field(it.code), it);
    else out += it.literal;
  }
  while (out.size() > start && out.back() == ' ') out.pop_back();
}

}  // namespace

Parsed<std::vector<FormatItem>> ParseJobFormat(const std::string& format) {
  Parsed<std::vector<FormatItem>> out;
  std::vector<FormatItem> items;
  std::string literal;
  auto flush = [&] {
    if (!literal.empty()) items.push_back(FormatItem{literal, 0, 0, false});
    literal.clear();
  };
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      literal += format[i];
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      literal += '%';
      ++i;
      continue;
    }
    size_t start = i++;
    FormatItem it;
    if (i < format.size() && format[i] == '.') {
      it.right = true;
      ++i;
    }
    while (i < format.size() && format[i] >= '0' && format[i] <= '9' && it.width < 10000)
      it.width = it.width * 10 + (format[i++] - '0');
    if (i >= format.size()) {
      out.error = "incomplete field '" + format.substr(start) + "' at the end of format '" + format + "'";
      return out;
    }
    if (!FindField(format[i])) {
      std::string known;
      for (const auto& f : kFields) known += std::string(known.empty() ? "%" : " %") + f.code;
      out.error = "unknown field code '%" + std::string(1, format[i]) + "' in format '" + format + "' (known: " + known + ")";
      return out;
    }
    it.code = format[i];
    flush();
    items.push_back(it);
  }
  flush();
  out.value = std::move(items);
  return out;
}

std::string FormatJobHeader(const std::vector<FormatItem>& items) {
  std::string line;
  AppendLine(line, items, [](char code) { return std::string(FindField(code)->title); });
  return line;
}

std::string FormatJobLine(const std::vector<FormatItem>& items, const v1::JobInfo& job, int64_t now) {
  std::string line;
  AppendLine(line, items, [&](char code) { return JobField(code, job, now); });
  return line;
}

void AppendJobLine(std::string& out, const std::vector<FormatItem>& items, const v1::JobInfo& job, int64_t now) {
  AppendLine(out, items, [&](char code) { return JobField(code, job, now); });
  out += '\n';
}

std::string FormatCores(int64_t millis) {
  std::string sign = millis < 0 ? "-" : "";
  uint64_t m = millis < 0 ? 0 - static_cast<uint64_t>(millis) : static_cast<uint64_t>(millis);
  std::string out = sign + std::to_string(m / 1000);
  if (m % 1000 == 0) return out;
  std::string frac = std::to_string(1000 + m % 1000).substr(1);
  while (frac.back() == '0') frac.pop_back();
  return out + "." + frac;
}

int64_t ElapsedSeconds(const v1::JobInfo& job, int64_t now) {
  if (job.start_time() <= 0 || job.state() == v1::PENDING) return 0;
  if (job.state() == v1::RUNNING || job.state() == v1::COMPLETING || job.end_time() <= 0)
    return std::max<int64_t>(0, now - job.start_time());
  return std::max<int64_t>(0, job.end_time() - job.start_time());
}

std::vector<std::string> JobNodes(const v1::JobInfo& job) {
  std::vector<std::string> nodes;
  std::vector<const v1::TaskPlacement*> tasks;
  for (const auto& t : job.tasks()) tasks.push_back(&t);
  std::sort(tasks.begin(), tasks.end(), [](auto* a, auto* b) { return a->rank() < b->rank(); });
  for (const auto* t : tasks)
    if (std::find(nodes.begin(), nodes.end(), t->node()) == nodes.end()) nodes.push_back(t->node());
  return nodes;
}

std::string JobIdText(const v1::JobInfo& job) {
  const auto& a = job.spec().array_index();
  if (a.array_job_id() == 0) return std::to_string(job.job_id());
  return std::to_string(a.array_job_id()) + "_" + std::to_string(a.task_id());
}

std::string JobField(char code, const v1::JobInfo& job, int64_t now) {
  const v1::JobSpec& s = job.spec();
  switch (code) {
    case 'i': return JobIdText(job);
    case 'F': return s.array_index().array_job_id() ? std::to_string(s.array_index().array_job_id()) : "N/A";
    case 'K': return s.array_index().array_job_id() ? std::to_string(s.array_index().task_id()) : "N/A";
    case 'E': return s.dependency().empty() ? "(null)" : s.dependency();
    case 'g': return job.pools().empty() ? "N/A" : job.pools();
    case 'G': return job.accelerator().empty() ? "N/A" : job.accelerator();
    case 'w': return std::to_string(job.preempt_count()) + "/" + std::to_string(job.evictions());
    case 'j': return s.name();
    case 'u': return job.user();
    case 'a': return s.account();
    case 'P': return s.partition();
    case 'q': return s.qos();
    case 'T': return StateName(job.state());
    case 't': return StateCode(job.state());
    case 'M': return FormatDuration(ElapsedSeconds(job, now));
    case 'l': return Limit(s.time_limit_s());
    case 'L':
      return s.time_limit_s() <= 0 ? "UNLIMITED" : FormatDuration(std::max<int64_t>(0, s.time_limit_s() - ElapsedSeconds(job, now)));
    case 'D': return std::to_string(JobNodes(job).size());
    case 'A': return TasksColumn(job);
    case 'C': return FormatCores(s.cpu_millis_per_task() * Tasks(job));
    case 'm': return s.memory_bytes_per_task() > 0 ? FormatBytes(s.memory_bytes_per_task()) : "0";
    case 'b': return Gpus(s);
    case 'R':
      if (job.state() == v1::PENDING || job.tasks().empty())
        return "(" + (job.reason().empty() ? std::string("None") : job.reason()) + ")";
      // The idle-GPU policy's flag ([idle]) follows the node list of a running job.
      return CompressHostlist(JobNodes(job)) + (job.idle_gpus_since() > 0 ? " (IDLE)" : "");
    case 'X': {
      if (job.idle_gpus_since() <= 0) return "-";
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s:%.1f%%", FormatDuration(std::max<int64_t>(0, now - job.idle_gpus_since())).c_str(),
                    job.idle_gpu_util());
      return buf;
    }
    case 'N': return CompressHostlist(JobNodes(job));
    case 'r': return job.reason().empty() ? "None" : job.reason();
    case 'S': return FormatTimestamp(job.start_time() > 0 ? job.start_time() : job.expected_start());
    case 'V': return FormatTimestamp(job.submit_time());
    case 'e': return FormatTimestamp(job.end_time());
    case 'Q': {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f", job.priority());
      return buf;
    }
    case 'Z': return s.workdir();
    case 'y': return std::to_string(s.nice());
    case 'o': return Command(s);
    case 'I': return s.has_container() ? s.container().image() : "N/A";
    case 'J': return job.image_digest().empty() ? "N/A" : job.image_digest().substr(0, 19);  // sha256: + 12 hex
    default: return "";
  }
}

nlohmann::json JobJson(const v1::JobInfo& job, int64_t now) {
  const v1::JobSpec& s = job.spec();
  auto nodes = JobNodes(job);
  // Elastic gangs: the range of sizes (tasks); null for a rigid gang.
  nlohmann::json range = s.min_tasks() > 0 ? nlohmann::json{{"min", s.min_tasks()}, {"max", s.ntasks()},
                                                            {"step", std::max(s.task_step(), 1)}}
                                           : nlohmann::json();
  return nlohmann::json{
      {"job_id", job.job_id()},
      {"name", s.name()},
      {"user", job.user()},
      {"uid", job.uid()},
      {"account", s.account()},
      {"partition", s.partition()},
      {"qos", s.qos()},
      {"state", StateName(job.state())},
      {"state_code", StateCode(job.state())},
      {"reason", job.reason()},
      {"tasks", Tasks(job)},
      {"task_range", range},
      {"nodes", nodes},
      {"nodelist", CompressHostlist(nodes)},
      {"submit_time", job.submit_time()},
      {"start_time", job.start_time()},
      {"end_time", job.end_time()},
      {"elapsed", ElapsedSeconds(job, now)},
      {"time_limit", s.time_limit_s()},
      {"exit_code", job.exit_code()},
      {"attempt", job.attempt()},
      {"requeue_count", job.requeue_count()},
      {"priority", job.priority()},
      {"expected_start", job.expected_start()},
      {"cpu_millis_per_task", s.cpu_millis_per_task()},
      {"memory_bytes_per_task", s.memory_bytes_per_task()},
      {"gpus_per_task", s.gpus_per_task()},
      {"gpu_types", std::vector<std::string>(s.gpu_types().begin(), s.gpu_types().end())},
      {"workdir", s.workdir()},
      {"hold", s.hold()},
      {"nice", s.nice()},
      {"topology", s.topology()},
      {"dependency", s.dependency()},
      {"spot", s.spot()},
      {"checkpoint_interval_s", s.checkpoint_interval_s()},
      {"data_region", s.data_region()},
      {"container_image", s.has_container() ? nlohmann::json(s.container().image()) : nlohmann::json()},
      {"image_digest", job.image_digest().empty() ? nlohmann::json() : nlohmann::json(job.image_digest())},
      {"pools", job.pools()},
      {"accelerator", job.accelerator()},
      {"preempt_count", job.preempt_count()},
      {"evictions", job.evictions()},
      {"resize", job.resize()},
      {"stall", job.stall()},
      {"usage", UsageJson(job)},
      {"idle_gpus", job.idle_gpus_since() > 0 ? nlohmann::json{{"since", job.idle_gpus_since()}, {"gpu_util_percent", job.idle_gpu_util()}}
                                               : nlohmann::json()},
      {"array_job_id", s.array_index().array_job_id()},
      {"array_task_id", s.array_index().array_job_id() ? nlohmann::json(s.array_index().task_id()) : nlohmann::json()},
  };
}

std::string FormatJobsJson(const std::vector<const v1::JobInfo*>& jobs, int64_t now) {
  std::string out = "[";
  for (size_t i = 0; i < jobs.size(); ++i) out += (i ? ",\n" : "\n") + JsonText(JobJson(*jobs[i], now));
  out += jobs.empty() ? "]\n" : "\n]\n";
  return out;
}

bool StartOrderLess(const v1::JobInfo& a, const v1::JobInfo& b) {
  const bool ka = a.expected_start() > 0, kb = b.expected_start() > 0;
  if (ka != kb) return ka;
  if (ka && a.expected_start() != b.expected_start()) return a.expected_start() < b.expected_start();
  return a.job_id() < b.job_id();
}

}  // namespace mlsched::cli
