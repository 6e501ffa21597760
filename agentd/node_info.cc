#include "agentd/node_info.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>
#include <thread>

#include "agentd/launcher.h"

namespace mlsched::agent {

int32_t NodeIdentity::GpuCount() const {
  int64_t n = 0;
  for (const auto& g : gpus) n += g.count;
  return static_cast<int32_t>(n);
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

int64_t DetectCpuMillis() {
  unsigned n = std::thread::hardware_concurrency();
  return static_cast<int64_t>(n ? n : 1) * 1000;
}

int64_t DetectMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

std::string GpuTypeFromName(const std::string& name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::vector<std::string> tokens;
  std::istringstream in(lower);
  for (std::string t; in >> t;) {
    if (t == "nvidia" || t == "tesla" || t == "geforce" || t == "quadro") continue;
    tokens.push_back(t.substr(0, t.find('-')));
  }
  auto all_digits = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if ((t == "rtx" || t == "gtx") && i + 1 < tokens.size() && all_digits(tokens[i + 1])) return t + tokens[i + 1];
    if (std::any_of(t.begin(), t.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) return t;
  }
  return "";
}

std::vector<GpuGroup> GroupGpuNames(const std::vector<std::string>& names) {
  std::vector<GpuGroup> out;
  for (const auto& n : names) {
    std::string type = GpuTypeFromName(n);
    if (type.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const GpuGroup& g) { return g.type == type; });
    if (it == out.end()) out.push_back({type, 1});
    else ++it->count;
  }
  return out;
}

std::vector<GpuGroup> DetectGpus() {
  const char* path = std::getenv("PATH");
  if (FindOnPath("nvidia-smi", path ? path : "/usr/local/bin:/usr/bin:/bin").empty()) return {};
  FILE* p = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r");
  if (!p) return {};
  std::vector<std::string> names;
  char line[512];
  while (fgets(line, sizeof line, p)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) names.push_back(s);
  }
  if (pclose(p) != 0) return {};
  return GroupGpuNames(names);
}

Parsed<std::vector<GpuGroup>> ParseGpuFlag(const std::vector<std::string>& values) {
  Parsed<std::vector<GpuGroup>> out;
  std::vector<GpuGroup> groups;
  for (const auto& v : values) {
    std::stringstream ss(v);
    for (std::string entry; std::getline(ss, entry, ',');) {
      if (entry == "none" || entry.empty()) continue;
      size_t colon = entry.find(':');
      std::string type = entry.substr(0, colon);
      std::string count = colon == std::string::npos ? "" : entry.substr(colon + 1);
      char* end = nullptr;
      long long n = count.empty() ? -1 : std::strtoll(count.c_str(), &end, 10);
      if (type.empty() || count.empty() || *end != '\0' || n < 0 || n > 1024) {
        out.error = "bad --gpus entry '" + entry + "': expected TYPE:N with N in 0..1024 (e.g. h100:8)";
        return out;
      }
      std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
      if (n > 0) groups.push_back({type, n});
    }
  }
  out.value = std::move(groups);
  return out;
}

bool IsValidPool(const std::string& pool) { return pool == "on-demand" || pool == "spot" || pool == "reserved"; }

bool IsLoopbackServer(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address;
  if (host.rfind("dns:", 0) == 0) host = host.substr(4);
  if (host.rfind("ipv4:", 0) == 0) host = host.substr(5);
  if (host.rfind("ipv6:", 0) == 0) host = host.substr(5);
  if (!host.empty() && host[0] == '[') host = host.substr(1, host.find(']') - 1);
  else if (std::count(host.begin(), host.end(), ':') == 1) host = host.substr(0, host.find(':'));
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace mlsched::agent
