#include "cli/job_states.h"

#include <signal.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <utility>

namespace mlsched::cli {

namespace {

struct StateNames {
  v1::JobState state;
  const char* name;
  const char* code;
};

// Slurm's names and squeue's compact codes (squeue(1), "JOB STATE CODES").
constexpr std::array<StateNames, 9> kStates{{
    {v1::PENDING, "PENDING", "PD"},
    {v1::RUNNING, "RUNNING", "R"},
    {v1::COMPLETING, "COMPLETING", "CG"},
    {v1::COMPLETED, "COMPLETED", "CD"},
    {v1::FAILED, "FAILED", "F"},
    {v1::CANCELLED, "CANCELLED", "CA"},
    {v1::TIMEOUT, "TIMEOUT", "TO"},
    {v1::PREEMPTED, "PREEMPTED", "PR"},
    {v1::NODE_FAIL, "NODE_FAIL", "NF"},
}};

constexpr std::array<std::pair<const char*, int>, 20> kSignals{{
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CONT", SIGCONT}, {"STOP", SIGSTOP},   {"TSTP", SIGTSTP}, {"URG", SIGURG},   {"XCPU", SIGXCPU},
}};

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

}  // namespace

std::string StateName(v1::JobState state) {
  for (const auto& s : kStates)
    if (s.state == state) return s.name;
  return "UNKNOWN";
}

std::string StateCode(v1::JobState state) {
  for (const auto& s : kStates)
    if (s.state == state) return s.code;
  return "?";
}

bool IsFinished(v1::JobState state) {
  return state == v1::COMPLETED || state == v1::FAILED || state == v1::CANCELLED || state == v1::TIMEOUT;
}

Parsed<std::vector<v1::JobState>> ParseStates(const std::string& text) {
  Parsed<std::vector<v1::JobState>> out;
  std::vector<v1::JobState> states;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = Upper(Trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (item == "ALL") {
      out.value = std::vector<v1::JobState>{};
      return out;
    }
    auto it = std::find_if(kStates.begin(), kStates.end(),
                           [&](const StateNames& s) { return item == s.name || item == s.code; });
    if (it == kStates.end()) {
      std::string valid;
      for (const auto& s : kStates) valid += std::string(valid.empty() ? "" : ", ") + s.name + "/" + s.code;
      out.error = "unknown job state '" + item + "' (valid: " + valid + ", all)";
      return out;
    }
    if (std::find(states.begin(), states.end(), it->state) == states.end()) states.push_back(it->state);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  out.value = std::move(states);
  return out;
}

Parsed<int> ParseSignal(const std::string& text) {
  Parsed<int> out;
  std::string name = Upper(Trim(text));
  if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
    int n = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec == std::errc() && p == name.data() + name.size() && n >= 1 && n <= 64) {
      out.value = n;
      return out;
    }
    out.error = "bad signal number '" + text + "' (expected 1-64)";
    return out;
  }
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (const auto& [n, v] : kSignals)
    if (name == n) {
      out.value = v;
      return out;
    }
  out.error = "unknown signal '" + text + "' (use a name like TERM, USR1, KILL or a number)";
  return out;
}

Parsed<int64_t> ParseJobId(const std::string& text) {
  Parsed<int64_t> out;
  int64_t id = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || id <= 0) out.error = "'" + text + "' is not a job id";
  else out.value = id;
  return out;
}

}  // namespace mlsched::cli
