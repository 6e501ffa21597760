#include "agentd/cgroup_layout.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace mlsched::agent {
namespace {

// The controllers agentd uses, in the order they are listed (v1 cpuacct: the tasks' CPU time, for
// the heartbeat's cpu_usec, when it is a hierarchy of its own).
const char* const kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids", "devices", "freezer"};
const char* const kV2Controllers[] = {"memory", "cpu", "pids"};

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

struct Mount {
  std::string root;         // the part of the hierarchy mounted here ("/" usually)
  std::string mountpoint;
  std::string fstype;       // cgroup | cgroup2
  std::set<std::string> options;  // super options: rw, memory, cpu, cpuacct, ...
};

std::vector<Mount> CgroupMounts(const std::string& mountinfo) {
  std::vector<Mount> out;
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    auto f = Words(line);
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    const std::string& fstype = f[dash + 1];
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    Mount m{UnescapeMountField(f[3]), UnescapeMountField(f[4]), fstype, {}};
    if (dash + 3 < f.size())
      for (auto& o : Split(f[dash + 3], ',')) m.options.insert(o);
    out.push_back(std::move(m));
  }
  return out;
}

// Joins a mount point and the cgroup path below the mount's root; nullopt when the cgroup is not
// inside the mounted part of the hierarchy.
std::optional<std::string> DirIn(const Mount& m, const std::string& path) {
  std::string root = m.root == "/" ? "" : m.root;
  if (path.compare(0, root.size(), root) != 0) return std::nullopt;
  std::string rest = path.substr(root.size());
  if (!rest.empty() && rest[0] != '/') return std::nullopt;
  if (rest == "/") rest.clear();
  return m.mountpoint + rest;
}

CgroupLayout V2Layout(const Mount& m, const std::string& path, const FileProbe& probe) {
  CgroupLayout l;
  auto dir = DirIn(m, path);
  if (!dir) return l;
  l.version = 2;
  l.v2_dir = *dir;
  l.paths[""] = path;
  auto available = probe(*dir + "/cgroup.controllers");
  std::set<std::string> offered;
  for (auto& w : Words(available.value_or(""))) offered.insert(w);
  for (const char* c : kV2Controllers)
    if (offered.count(c)) l.controllers.insert(c);
  if (probe(*dir + "/cgroup.kill")) l.controllers.insert("kill");
  else if (probe(*dir + "/cgroup.freeze")) l.controllers.insert("freeze");
  return l;
}

}  // namespace

std::optional<CgroupMode> ParseCgroupMode(std::string_view text) {
  if (text == "auto") return CgroupMode::kAuto;
  if (text == "off") return CgroupMode::kOff;
  if (text == "required") return CgroupMode::kRequired;
  return std::nullopt;
}

std::string UnescapeMountField(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      std::string_view oct = field.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string_view::npos) {
        out += static_cast<char>((oct[0] - '0') * 64 + (oct[1] - '0') * 8 + (oct[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

CgroupLayout ParseCgroupLayout(const std::string& mountinfo, const std::string& proc_cgroup, const FileProbe& probe) {
  // /proc/self/cgroup: "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
  std::map<std::string, std::string> v1_path;  // controller -> own path
  std::optional<std::string> v2_path;
  std::istringstream in(proc_cgroup);
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) v2_path = path;
    else
      for (auto& c : Split(controllers, ',')) v1_path[c] = path;
  }
  auto mounts = CgroupMounts(mountinfo);
  if (v2_path) {
    for (const auto& m : mounts) {
      if (m.fstype != "cgroup2") continue;
      CgroupLayout l = V2Layout(m, *v2_path, probe);
      if (l.Has("memory")) return l;
      break;
    }
  }
  CgroupLayout v1;
  for (const char* c : kV1Controllers) {
    auto path = v1_path.find(c);
    if (path == v1_path.end()) continue;
    for (const auto& m : mounts) {
      if (m.fstype != "cgroup" || !m.options.count(c)) continue;
      if (auto dir = DirIn(m, path->second)) {
        v1.v1_dirs[c] = *dir;
        v1.paths[c] = path->second;
        v1.controllers.insert(c);
        break;
      }
    }
  }
  if (!v1.v1_dirs.empty()) {
    v1.version = 1;
    return v1;
  }
  if (v2_path)
    for (const auto& m : mounts)
      if (m.fstype == "cgroup2") return V2Layout(m, *v2_path, probe);
  return {};
}

CgroupLayout DetectCgroups() {
  auto read = [](const std::string& path) -> std::optional<std::string> {
    std::ifstream f(path);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  return ParseCgroupLayout(read("/proc/self/mountinfo").value_or(""), read("/proc/self/cgroup").value_or(""), read);
}

std::string CgroupLayout::Summary() const {
  if (version == 0) return "none";
  std::string out = "v" + std::to_string(version) + ":";
  const char* const order[] = {"memory", "cpu", "pids", "devices", "freezer", "kill", "freeze"};  // same as Describe
  bool first = true;
  for (const char* c : order) {
    if (!Has(c)) continue;
    out += (first ? "" : ",") + std::string(c);
    first = false;
  }
  return out;
}

std::string CgroupLayout::Missing() const {
  std::vector<std::string> missing;
  const char* const limits[] = {"memory", "cpu", "pids"};
  for (const char* c : limits)
    if (!Has(c)) missing.push_back(c);
  if (version == 2) {
    if (!Has("devices")) missing.push_back("devices (cgroup v2 needs an eBPF device program, which could not be loaded)");
    if (!Has("kill") && !Has("freeze")) missing.push_back("kill (neither cgroup.kill nor cgroup.freeze)");
  } else {
    if (!Has("devices")) missing.push_back("devices");
    if (!Has("freezer")) missing.push_back("freezer (processes are killed without freezing them first)");
  }
  std::string out;
  for (const auto& m : missing) out += (out.empty() ? "" : ", ") + m;
  return out;
}

std::string CgroupLayout::Describe() const {
  if (version == 0)
    return "cgroups: none - tasks run without memory/CPU/device limits and escaped processes are found by "
           "their environment (no cgroup v1 controller or cgroup2 hierarchy is mounted)";
  std::string out = "cgroups: v" + std::to_string(version);
  std::string list = Summary().substr(3);
  for (char& ch : list)
    if (ch == ',') ch = ' ';
  std::istringstream in(list);
  bool first = true;
  for (std::string c; in >> c; first = false) out += (first ? " " : ", ") + c;
  if (list.empty()) out += " (no controllers: tasks are tracked and killed through it, without limits)";
  if (auto m = Missing(); !m.empty()) out += "; not enforced: " + m;
  return out;
}

}  // namespace mlsched::agent
