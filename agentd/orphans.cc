#include "agentd/orphans.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace mlsched::agent {

std::vector<pid_t> ListChildren() {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

std::optional<TaskKey> TaskFromEnviron(const std::string& environ) {
  std::optional<long long> job, attempt, rank;
  size_t start = 0;
  while (start < environ.size()) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    std::string_view kv(environ.data() + start, end - start);
    auto value = [&](std::string_view key) -> std::optional<long long> {
      if (kv.size() <= key.size() || kv.substr(0, key.size()) != key || kv[key.size()] != '=') return std::nullopt;
      try {
        return std::stoll(std::string(kv.substr(key.size() + 1)));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    };
    if (auto v = value("MLSCHED_JOB_ID")) job = v;
    if (auto v = value("MLSCHED_ATTEMPT")) attempt = v;
    if (auto v = value("MLSCHED_TASK_ID")) rank = v;
    start = end + 1;
  }
  if (!job || !attempt || !rank) return std::nullopt;
  return TaskKey{*job, static_cast<int32_t>(*attempt), static_cast<int32_t>(*rank)};
}

std::optional<TaskKey> TaskOfProcess(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return TaskFromEnviron(ss.str());
}

std::optional<int64_t> CpuUsecFromStat(const std::string& stat, long ticks_per_second) {
  // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses, so fields count from the
  // last ')'; utime is field 14, stime 15, cutime 16, cstime 17 (proc(5), 1-based).
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || ticks_per_second <= 0) return std::nullopt;
  std::istringstream in(stat.substr(close + 1));
  std::string field;
  int64_t ticks = 0;
  for (int n = 3; n <= 17 && in >> field; ++n) {
    if (n < 14) continue;
    try {
      size_t used = 0;
      const long long v = std::stoll(field, &used);
      if (used != field.size() || v < 0) return std::nullopt;
      ticks += v;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (n == 17) return ticks * (1000000 / ticks_per_second);
  }
  return std::nullopt;
}

std::optional<int64_t> ProcessCpuUsec(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!f || !std::getline(f, text)) return std::nullopt;
  return CpuUsecFromStat(text, sysconf(_SC_CLK_TCK));
}

pid_t ParentPid(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!f || !std::getline(f, text)) return -1;
  const size_t close = text.rfind(')');  // fields count from the last ')' (CpuUsecFromStat)
  if (close == std::string::npos) return -1;
  std::istringstream in(text.substr(close + 1));
  std::string state;
  long ppid = -1;
  if (!(in >> state >> ppid)) return -1;
  return static_cast<pid_t>(ppid);
}

}  // namespace mlsched::agent
