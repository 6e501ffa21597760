#include "agentd/reload_state.h"

#include <charconv>
#include <map>
#include <set>
#include <sstream>

namespace mlsched::agent {
namespace {

constexpr const char* kHeader = "mlsched-agentd-reload 1";
constexpr char kHex[] = "0123456789abcdef";

std::string Hex(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::optional<std::string> Unhex(const std::string& text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out(text.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

// The fields of a line, split at single spaces.
std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= line.size()) {
    size_t end = line.find(' ', start);
    if (end == std::string::npos) end = line.size();
    out.push_back(line.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

template <typename T>
bool Number(const std::string& s, T min, T max, T* out) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

std::string FormatReloadState(const ReloadState& state) {
  std::ostringstream out;
  out << kHeader << "\n";
  if (state.disconnected_since_ms) out << "disconnected " << *state.disconnected_since_ms << "\n";
  for (const auto& a : state.attempts)
    out << "attempt " << a.key.job_id << " " << a.key.attempt << " " << a.master_port << " "
        << (a.image_digest.empty() ? "-" : a.image_digest) << " " << Hex(a.prepare) << "\n";
  for (const auto& t : state.tasks)
    out << "task " << t.key.job_id << " " << t.key.attempt << " " << t.key.rank << " " << t.pid << " "
        << t.max_rss_bytes << "\n";
  out << "end\n";
  return out.str();
}

Parsed<ReloadState> ParseReloadState(const std::string& text) {
  Parsed<ReloadState> r;
  if (text.size() > kMaxReloadStateBytes) {
    r.error = "reload state of " + std::to_string(text.size()) + " bytes exceeds " + std::to_string(kMaxReloadStateBytes);
    return r;
  }
  ReloadState s;
  std::set<AttemptKey> attempts;
  std::set<TaskKey> tasks;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  bool ended = false;
  auto fail = [&](const std::string& why) {
    r.error = "line " + std::to_string(n) + ": " + why;
    return r;
  };
  while (std::getline(in, line)) {
    ++n;
    if (ended) return fail("text after 'end'");
    if (n == 1) {
      if (line != kHeader) return fail("not a reload state of this version (expected '" + std::string(kHeader) + "')");
      continue;
    }
    const auto f = Fields(line);
    if (f[0] == "end" && f.size() == 1) {
      ended = true;
    } else if (f[0] == "disconnected" && f.size() == 2) {
      int64_t ms = 0;
      if (s.disconnected_since_ms || !Number<int64_t>(f[1], 0, INT64_MAX, &ms))
        return fail("bad or repeated 'disconnected' '" + f[1].substr(0, 32) + "'");
      s.disconnected_since_ms = ms;
    } else if (f[0] == "attempt" && f.size() == 6) {
      ReloadState::Attempt a;
      if (!Number<int64_t>(f[1], 1, INT64_MAX, &a.key.job_id) || !Number<int32_t>(f[2], 0, INT32_MAX, &a.key.attempt))
        return fail("bad attempt key '" + f[1].substr(0, 32) + " " + f[2].substr(0, 32) + "'");
      if (!Number<int32_t>(f[3], 0, 65535, &a.master_port)) return fail("bad master port '" + f[3].substr(0, 32) + "'");
      if (f[4] != "-") {
        if (f[4].size() != 71 || f[4].compare(0, 7, "sha256:") != 0 || !Unhex(f[4].substr(7)))
          return fail("bad image digest '" + f[4].substr(0, 80) + "'");
        a.image_digest = f[4];
      }
      if (f[5].size() > 2 * kMaxReloadPrepareBytes)
        return fail("prepare of " + std::to_string(f[5].size() / 2) + " bytes exceeds " + std::to_string(kMaxReloadPrepareBytes));
      auto bytes = Unhex(f[5]);
      if (!bytes) return fail("prepare is not hexadecimal");
      a.prepare = std::move(*bytes);
      if (!attempts.insert(a.key).second) return fail("attempt " + a.key.ToString() + " listed twice");
      if (attempts.size() > kMaxReloadAttempts) return fail("more than " + std::to_string(kMaxReloadAttempts) + " attempts");
      s.attempts.push_back(std::move(a));
    } else if (f[0] == "task" && f.size() == 6) {
      ReloadState::Task t;
      if (!Number<int64_t>(f[1], 1, INT64_MAX, &t.key.job_id) || !Number<int32_t>(f[2], 0, INT32_MAX, &t.key.attempt) ||
          !Number<int32_t>(f[3], 0, INT32_MAX, &t.key.rank))
        return fail("bad task key");
      if (!Number<pid_t>(f[4], 2, INT32_MAX, &t.pid)) return fail("bad pid '" + f[4].substr(0, 32) + "'");
      if (!Number<int64_t>(f[5], -1, INT64_MAX, &t.max_rss_bytes)) return fail("bad max_rss '" + f[5].substr(0, 32) + "'");
      if (!attempts.count(t.key.Attempt())) return fail("task " + t.key.ToString() + " of an attempt not listed before it");
      if (!tasks.insert(t.key).second) return fail("task " + t.key.ToString() + " listed twice");
      if (tasks.size() > kMaxReloadTasks) return fail("more than " + std::to_string(kMaxReloadTasks) + " tasks");
      s.tasks.push_back(t);
    } else {
      return fail("unknown line '" + line.substr(0, 40) + "'");
    }
  }
  if (n == 0) {
    r.error = "empty reload state";
    return r;
  }
  if (!ended) {
    r.error = "reload state ends without 'end' (cut short)";
    return r;
  }
  r.value = std::move(s);
  return r;
}

}  // namespace mlsched::agent
