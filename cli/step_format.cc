#include "cli/step_format.h"

#include <algorithm>
#include <cstdio>

#include "common/safe_text.h"
#include "common/units.h"

namespace mlsched::cli {

namespace {

int64_t Elapsed(const v1::StepInfo& s, int64_t now) {
  if (s.start_time() <= 0) return 0;
  return std::max<int64_t>(0, (s.end_time() > 0 ? s.end_time() : now) - s.start_time());
}

std::string Clock(int64_t s) {
  char buf[48];
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", static_cast<long long>(s / 86400),
                  static_cast<long long>(s / 3600 % 24), static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600), static_cast<long long>(s / 60 % 60),
                  static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

std::string Pad(const std::string& s, size_t width) { return s.size() >= width ? s + " " : s + std::string(width - s.size() + 1, ' '); }

}  // namespace

std::string FormatStepTable(const std::vector<v1::StepInfo>& steps, int64_t now, bool noheader) {
  std::string out;
  if (!noheader)
    out += Pad("STEPID", 12) + Pad("NAME", 16) + Pad("STATE", 10) + Pad("TASKS", 5) + Pad("EXIT", 4) + Pad("ELAPSED", 10) +
           Pad("USER", 10) + Pad("TOTALCPU", 10) + Pad("MAXRSS", 7) + "NODES\n";
  for (const auto& s : steps) {
    const bool running = s.state() == "RUNNING";
    out += Pad(std::to_string(s.job_id()) + "." + std::to_string(s.step_id()), 12) + Pad(SafeText(s.name()), 16) +
           Pad(SafeText(s.state()), 10) + Pad(std::to_string(s.ntasks()), 5) +
           Pad(running ? "-" : std::to_string(s.exit_code()), 4) + Pad(Clock(Elapsed(s, now)), 10) + Pad(SafeText(s.user()), 10) +
           Pad(s.cpu_usec() >= 0 && !running ? Clock(s.cpu_usec() / 1'000'000) : "-", 10) +
           Pad(s.max_rss_bytes() > 0 && !running ? FormatBytes(s.max_rss_bytes()) : "-", 7) + SafeText(s.nodes()) + "\n";
  }
  return out;
}

nlohmann::json StepJson(const v1::StepInfo& s, int64_t now) {
  nlohmann::json nodes = nlohmann::json::array();
  const std::string& all = s.nodes();
  for (size_t pos = 0; pos < all.size();) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    if (comma > pos) nodes.push_back(SafeText(all.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return {{"step_id", std::to_string(s.job_id()) + "." + std::to_string(s.step_id())},
          {"job_id", s.job_id()},
          {"step", s.step_id()},
          {"name", SafeText(s.name())},
          {"state", SafeText(s.state())},
          {"ntasks", s.ntasks()},
          {"exit_code", s.exit_code()},
          {"start_time", s.start_time()},
          {"end_time", s.end_time()},
          {"elapsed_s", Elapsed(s, now)},
          {"user", SafeText(s.user())},
          // What its tasks' processes used (their agents' getrusage); null while unknown.
          {"cpu_s", s.cpu_usec() >= 0 && s.end_time() > 0 ? nlohmann::json(s.cpu_usec() / 1e6) : nlohmann::json()},
          {"max_rss_bytes", s.max_rss_bytes() > 0 && s.end_time() > 0 ? nlohmann::json(s.max_rss_bytes()) : nlohmann::json()},
          {"nodes", nodes}};
}

}  // namespace mlsched::cli
