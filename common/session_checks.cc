#include "common/session_checks.h"

#include <algorithm>
#include <csignal>

namespace mlsched {
namespace {

std::string CheckWindow(const v1::WindowSize& w, const char* what) {
  if (w.rows() < 1 || w.rows() > kMaxWindowCells || w.cols() < 1 || w.cols() > kMaxWindowCells)
    return std::string(what) + " " + std::to_string(w.rows()) + "x" + std::to_string(w.cols()) +
           " is out of range (1.." + std::to_string(kMaxWindowCells) + " rows and columns)";
  return "";
}

}  // namespace

bool SessionSignalAllowed(int32_t s) {
  switch (s) {
    case SIGINT: case SIGQUIT: case SIGTERM: case SIGHUP: case SIGKILL:
    case SIGUSR1: case SIGUSR2: case SIGCONT: case SIGTSTP: case SIGWINCH:
      return true;
    default:
      return false;
  }
}

std::string CheckSessionOpen(const v1::SessionOpen& o) {
  if (o.job_id() <= 0) return "job id " + std::to_string(o.job_id()) + " is not a job";
  if (o.rank() < 0) return "rank " + std::to_string(o.rank()) + " is negative";
  if (o.argv_size() == 0 || o.argv(0).empty()) return "no command";
  if (static_cast<size_t>(o.argv_size()) > kMaxSessionArgs)
    return "the command has " + std::to_string(o.argv_size()) + " arguments (at most " + std::to_string(kMaxSessionArgs) + ")";
  size_t bytes = 0;
  for (const auto& a : o.argv()) {
    bytes += a.size() + 1;
    if (a.find('\0') != std::string::npos) return "an argument holds a NUL byte";
  }
  if (bytes > kMaxSessionArgvBytes)
    return "the command is " + std::to_string(bytes) + " bytes (at most " + std::to_string(kMaxSessionArgvBytes) + ")";
  if (static_cast<size_t>(o.env_size()) > kMaxSessionEnv)
    return "the session sets " + std::to_string(o.env_size()) + " variables (at most " + std::to_string(kMaxSessionEnv) + ")";
  bytes = 0;
  for (const auto& kv : o.env()) {
    bytes += kv.size() + 1;
    const size_t eq = kv.find('=');
    bool ok = eq != std::string::npos && eq > 0 && kv.find('\0') == std::string::npos &&
              !(kv[0] >= '0' && kv[0] <= '9');
    for (size_t i = 0; ok && i < eq; ++i)
      ok = (kv[i] >= 'a' && kv[i] <= 'z') || (kv[i] >= 'A' && kv[i] <= 'Z') || (kv[i] >= '0' && kv[i] <= '9') || kv[i] == '_';
    if (!ok) return "'" + kv.substr(0, std::min<size_t>(kv.size(), 64)) + "' is not NAME=VALUE";
  }
  if (bytes > kMaxSessionArgvBytes)
    return "the session's variables are " + std::to_string(bytes) + " bytes (at most " + std::to_string(kMaxSessionArgvBytes) + ")";
  if (o.has_window())
    if (auto e = CheckWindow(o.window(), "the window"); !e.empty()) return e;
  if (o.has_step_id() && (o.step_id() < 0 || o.step_id() >= kMaxStepsPerJob))
    return "step " + std::to_string(o.step_id()) + " is out of range (0.." + std::to_string(kMaxStepsPerJob - 1) + ")";
  if (o.step_task() < 0 || o.step_task() >= kMaxStepTasks || (!o.has_step_id() && o.step_task() != 0))
    return "step task " + std::to_string(o.step_task()) + " is out of range";
  if (o.term().size() > kMaxTermBytes) return "TERM is longer than " + std::to_string(kMaxTermBytes) + " bytes";
  for (char c : o.term())
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '+' ||
          c == '_'))
      return "TERM holds a character other than letters, digits, '-', '.', '+' and '_'";
  return "";
}

std::string CheckSessionInput(const v1::SessionInput& in) {
  switch (in.msg_case()) {
    case v1::SessionInput::kOpen: return "a second open";
    case v1::SessionInput::kData:
      if (in.data().size() > kMaxSessionChunk)
        return "input of " + std::to_string(in.data().size()) + " bytes in one message (at most " +
               std::to_string(kMaxSessionChunk) + ")";
      return "";
    case v1::SessionInput::kEof: return "";
    case v1::SessionInput::kResize: return CheckWindow(in.resize(), "the new window");
    case v1::SessionInput::kSignal:
      return SessionSignalAllowed(in.signal()) ? "" : "signal " + std::to_string(in.signal()) + " may not be sent";
    default: return "an empty message";
  }
}

}  // namespace mlsched
