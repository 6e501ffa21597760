#include "agentd/orphans.h"

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

}  // namespace mlsched::agent
