#include "common/units.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <utility>

namespace mlsched {
namespace {

template <typename T>
Parsed<T> Fail(std::string msg) {
  Parsed<T> p;
  p.error = std::move(msg);
  return p;
}
template <typename T>
Parsed<T> Ok(T v) {
  Parsed<T> p;
  p.value = std::move(v);
  return p;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses a non-negative integer that must span the whole string.
std::optional<int64_t> ParseUint(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

Parsed<int64_t> ParseMemory(const std::string& text) {
  std::string t = Lower(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  std::string num = t.substr(0, i), unit = t.substr(i);
  if (num.empty()) return Fail<int64_t>("bad memory size '" + text + "': expected a number like 512M or 4G");
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (*end != '\0' || v < 0) return Fail<int64_t>("bad memory size '" + text + "'");
  if (unit.ends_with("ib")) unit.resize(unit.size() - 2);
  else if (unit.size() > 1 && unit.ends_with("b")) unit.resize(unit.size() - 1);
  double mult;
  if (unit.empty() || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "b") mult = 1;
  else if (unit == "k") mult = 1024.0;
  else if (unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else return Fail<int64_t>("bad memory size '" + text + "': unknown unit '" + unit + "' (use K, M, G or T)");
  double bytes = v * mult;
  if (bytes > 9.0e18) return Fail<int64_t>("memory size '" + text + "' is too large");
  return Ok<int64_t>(static_cast<int64_t>(std::llround(bytes)));
}

Parsed<int64_t> ParseCpus(const std::string& text) {
  std::string t = Lower(text);
  if (t.ends_with("m")) {
    auto v = ParseUint(t.substr(0, t.size() - 1));
    if (!v) return Fail<int64_t>("bad CPU count '" + text + "'");
    return Ok<int64_t>(*v);
  }
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 1e9)
    return Fail<int64_t>("bad CPU count '" + text + "': expected a number like 2 or 0.5");
  return Ok<int64_t>(static_cast<int64_t>(std::llround(v * 1000)));
}

Parsed<int64_t> ParseDuration(const std::string& text) {
  std::string t = Lower(text);
  const std::string bad = "bad time limit '" + text + "': expected M, M:S, H:M:S, D-H, D-H:M:S, or 30s/10m/4h/2d";
  if (t == "unlimited" || t == "infinite") return Ok<int64_t>(0);
  if (t.empty()) return Fail<int64_t>(bad);
  // Every component is checked against the limit before it is multiplied (at most 86400), so no
  // intermediate value can overflow.
  const std::string too_long = "time limit '" + text + "' is too long (at most 1000 years)";
  auto within = [](int64_t v) { return v <= kMaxDurationSeconds; };
  char last = t.back();
  if (last == 's' || last == 'm' || last == 'h' || last == 'd') {
    auto v = ParseUint(t.substr(0, t.size() - 1));
    if (!v) return Fail<int64_t>(bad);
    int64_t mult = last == 's' ? 1 : last == 'm' ? 60 : last == 'h' ? 3600 : 86400;
    if (!within(*v) || !within(*v * mult)) return Fail<int64_t>(too_long);
    return Ok<int64_t>(*v * mult);
  }
  int64_t days = 0;
  std::string rest = t;
  bool has_days = false;
  if (auto dash = t.find('-'); dash != std::string::npos) {
    auto d = ParseUint(t.substr(0, dash));
    if (!d) return Fail<int64_t>(bad);
    if (!within(*d)) return Fail<int64_t>(too_long);
    days = *d;
    rest = t.substr(dash + 1);
    has_days = true;
  }
  std::vector<int64_t> parts;
  size_t start = 0;
  while (true) {
    size_t colon = rest.find(':', start);
    auto v = ParseUint(rest.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (!v) return Fail<int64_t>(bad);
    if (!within(*v)) return Fail<int64_t>(too_long);
    parts.push_back(*v);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return Fail<int64_t>(bad);
  int64_t secs = 0;
  if (has_days) {  // D-H, D-H:M, D-H:M:S
    secs = parts[0] * 3600 + (parts.size() > 1 ? parts[1] * 60 : 0) + (parts.size() > 2 ? parts[2] : 0);
  } else if (parts.size() == 1) {
    secs = parts[0] * 60;  // minutes
  } else if (parts.size() == 2) {
    secs = parts[0] * 60 + parts[1];  // M:S
  } else {
    secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
  }
  if (!within(days * 86400 + secs)) return Fail<int64_t>(too_long);
  return Ok<int64_t>(days * 86400 + secs);
}

namespace {

// An age "2d", "36hours", "1week", else a time as limits are written ("1-12:00:00"); 0 = not one.
int64_t ParseAge(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"s", 1},      {"sec", 1},      {"secs", 1},      {"second", 1},   {"seconds", 1}, {"m", 60},
      {"min", 60},   {"mins", 60},    {"minute", 60},   {"minutes", 60}, {"h", 3600},    {"hour", 3600},
      {"hours", 3600}, {"d", 86400},  {"day", 86400},   {"days", 86400}, {"w", 604800},  {"week", 604800},
      {"weeks", 604800}};
  if (digits > 0 && digits < text.size() && std::isalpha(static_cast<unsigned char>(text[digits]))) {
    const std::string unit = Lower(text.substr(digits));
    auto n = ParseUint(text.substr(0, digits));
    for (const auto& [name, mult] : kUnits)
      if (unit == name) return !n ? -1 : *n > kMaxDurationSeconds / mult ? -1 : *n * mult;
    return 0;
  }
  if (text.find(':') == std::string::npos && text.find('-') == std::string::npos) return 0;
  auto d = ParseDuration(text);
  return d ? *d.value : (d.error.find("too long") != std::string::npos ? -1 : 0);
}

// "YYYY-MM-DD[THH:MM[:SS]]" in local time; nullopt when malformed or out of range.
std::optional<int64_t> ParseLocalTime(const std::string& t) {
  static const char* kShape = "dddd-dd-ddTdd:dd:dd";
  if (t.size() != 10 && t.size() != 16 && t.size() != 19) return std::nullopt;
  for (size_t i = 0; i < t.size(); ++i)
    if (kShape[i] == 'd' ? !std::isdigit(static_cast<unsigned char>(t[i])) : t[i] != kShape[i]) return std::nullopt;
  auto num = [&](size_t at, size_t len) { return static_cast<int>(*ParseUint(t.substr(at, len))); };
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900;
  tm.tm_mon = num(5, 2) - 1;
  tm.tm_mday = num(8, 2);
  tm.tm_hour = t.size() > 10 ? num(11, 2) : 0;
  tm.tm_min = t.size() > 10 ? num(14, 2) : 0;
  tm.tm_sec = t.size() > 16 ? num(17, 2) : 0;
  tm.tm_isdst = -1;
  std::tm in = tm;
  const std::time_t v = std::mktime(&tm);
  // mktime normalises 2026-02-30 to March 2: a changed field means the input was out of range.
  if (v < 0 || tm.tm_year != in.tm_year || tm.tm_mon != in.tm_mon || tm.tm_mday != in.tm_mday ||
      tm.tm_hour != in.tm_hour || tm.tm_min != in.tm_min || tm.tm_sec != in.tm_sec)
    return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

Parsed<int64_t> ParseTimePoint(const std::string& text, int64_t now) {
  const std::string bad = "bad time '" + text +
                          "': expected now, -AGE or now-AGE (-2d, -36h, -1week, -1-12:00:00), "
                          "YYYY-MM-DD[THH:MM[:SS]] (local time) or @SECONDS";
  if (text == "now") return Ok<int64_t>(now);
  std::string age;
  if (text.starts_with("now-")) age = text.substr(4);
  else if (text.starts_with("-")) age = text.substr(1);
  if (!age.empty()) {
    const int64_t s = ParseAge(age);
    if (s < 0) return Fail<int64_t>("time '" + text + "' is too long ago (at most 1000 years)");
    if (s == 0) return Fail<int64_t>(bad);
    return Ok<int64_t>(now - s);
  }
  if (text.size() > 1 && text[0] == '@') {
    auto v = ParseUint(text.substr(1));
    return v ? Ok<int64_t>(*v) : Fail<int64_t>(bad);
  }
  if (auto v = ParseLocalTime(text)) return Ok<int64_t>(*v);
  return Fail<int64_t>(bad);
}

std::string FormatDuration(int64_t s) {
  if (s < 0) s = 0;
  int64_t d = s / 86400, h = (s / 3600) % 24, m = (s / 60) % 60, sec = s % 60;
  char buf[64];
  if (d > 0) std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", (long long)d, (long long)h, (long long)m, (long long)sec);
  else if (h > 0) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)h, (long long)m, (long long)sec);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)m, (long long)sec);
  return buf;
}

std::string FormatBytes(int64_t b) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 5) { v /= 1024; ++u; }
  char buf[32];
  if (v == std::floor(v)) std::snprintf(buf, sizeof buf, "%.0f%s", v, units[u]);
  else std::snprintf(buf, sizeof buf, "%.1f%s", v, units[u]);
  return buf;
}

std::string FormatTimestamp(int64_t t) {
  if (t <= 0) return "N/A";
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

Parsed<std::vector<std::string>> ExpandHostlist(const std::string& text) {
  auto lb = text.find('[');
  if (lb == std::string::npos) return Ok<std::vector<std::string>>({text});
  auto rb = text.find(']', lb);
  if (rb == std::string::npos) return Fail<std::vector<std::string>>("bad hostlist '" + text + "': missing ']'");
  std::string prefix = text.substr(0, lb), suffix = text.substr(rb + 1), body = text.substr(lb + 1, rb - lb - 1);
  struct Range {
    size_t width;  // digits of the range's first number: members are zero-padded to it
    int64_t first, last;
  };
  std::vector<Range> ranges;
  size_t names = 0, bytes = 0;
  size_t start = 0;
  while (start <= body.size()) {  // check every range (and the total) before expanding any
    size_t comma = body.find(',', start);
    std::string item = body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto dash = item.find('-');
    std::string lo = item.substr(0, dash), hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    auto a = ParseUint(lo), b = ParseUint(hi);
    if (!a || !b || *b < *a || *b - *a > kMaxHostlistRange)
      return Fail<std::vector<std::string>>("bad hostlist '" + text + "': bad range '" + item + "'");
    if (static_cast<size_t>(*b - *a) >= kMaxHostlistNames - names)
      return Fail<std::vector<std::string>>("bad hostlist '" + text + "': more than " + std::to_string(kMaxHostlistNames) + " names");
    names += static_cast<size_t>(*b - *a) + 1;
    // Each name is at most prefix + suffix + max(width, digits of the last number) bytes; names,
    // width <= 18 and the text's size keep this product far from overflowing.
    bytes += (static_cast<size_t>(*b - *a) + 1) * (prefix.size() + suffix.size() + std::max(lo.size(), hi.size()));
    if (bytes > kMaxHostlistBytes)
      return Fail<std::vector<std::string>>("bad hostlist '" + text.substr(0, 200) + "': more than " +
                                            std::to_string(kMaxHostlistBytes >> 20) + " MiB of names");
    ranges.push_back({lo.size(), *a, *b});
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<std::string> out;
  out.reserve(names);
  for (const Range& r : ranges) {
    for (int64_t i = r.first; i <= r.last; ++i) {
      std::string n = std::to_string(i);
      if (n.size() < r.width) n = std::string(r.width - n.size(), '0') + n;
      out.push_back(prefix + n + suffix);
    }
  }
  return Ok(std::move(out));
}

}  // namespace mlsched
