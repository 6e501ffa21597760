#include "agentd/cdi_plan.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <set>

namespace mlsched::agent {
namespace {

std::string Basename(const std::string& p) { return p.substr(p.rfind('/') + 1); }
std::string Dirname(const std::string& p) {
  const auto slash = p.rfind('/');
  return slash == 0 ? "/" : p.substr(0, slash);
}

// A hook of NVIDIA's toolkit, split: its subcommand and its flags ("--link" -> values).
struct ToolkitHook {
  std::string sub;
  std::multimap<std::string, std::string> flags;
};

// `hook` as nvidia-ctk's (args: nvidia-ctk hook SUB ...) or nvidia-cdi-hook's (nvidia-cdi-hook
// SUB ...); an empty sub for any other program.
ToolkitHook SplitHook(const CdiHook& hook) {
  ToolkitHook out;
  const std::string prog = Basename(hook.path);
  if (prog != "nvidia-ctk" && prog != "nvidia-cdi-hook") return out;
  size_t i = 1;
  if (prog == "nvidia-ctk") {
    if (hook.args.size() < 2 || hook.args[1] != "hook") return out;
    i = 2;
  }
  if (i >= hook.args.size()) return out;
  out.sub = hook.args[i++];
  for (; i < hook.args.size(); ++i) {
    const std::string& a = hook.args[i];
    if (a.rfind("--", 0) != 0) continue;
    const auto eq = a.find('=');
    if (eq != std::string::npos) out.flags.emplace(a.substr(2, eq - 2), a.substr(eq + 1));
    else if (i + 1 < hook.args.size()) out.flags.emplace(a.substr(2), hook.args[++i]);
  }
  return out;
}

bool Reproduced(const std::string& sub) {
  return sub == "create-symlinks" || sub == "update-ldcache" || sub == "create-soname-symlinks" || sub == "chmod";
}

bool Clean(const std::string& p) {
  if (p.empty() || p[0] != '/' || p == "/" || p.back() == '/') return false;
  for (size_t pos = 1; pos <= p.size();) {
    size_t end = p.find('/', pos);
    if (end == std::string::npos) end = p.size();
    const std::string c = p.substr(pos, end - pos);
    if (c.empty() || c == "." || c == "..") return false;
    pos = end + 1;
  }
  return true;
}

// Below a filesystem runc mounts over (a mount or link put there would be hidden, or reach
// the kernel's files).
bool UnderRuntimeMounts(const std::string& p) {
  for (const char* top : {"/proc", "/sys", "/dev"})
    if (p == top || p.rfind(std::string(top) + "/", 0) == 0) return true;
  return false;
}

std::string HostOf(const CdiDeviceNode& n) { return n.host_path.empty() ? n.path : n.host_path; }

// Adds one edit list's device nodes to `plan`; a node already there (same path) is kept.
std::string AddDevices(const CdiEdits& e, const std::string& where, CdiPlan* plan) {
  for (const auto& n : e.device_nodes) {
    const bool seen = std::any_of(plan->devices.begin(), plan->devices.end(),
                                  [&](const OciDevice& d) { return d.path == n.path; });
    if (seen) continue;
    if (!Clean(n.path) || n.path.rfind("/dev/", 0) != 0) return where + ": device node " + n.path + " is not a clean path below /dev";
    if (!n.type.empty() && n.type != "c")
      return where + ": device node " + n.path + " has type '" + n.type + "'; only character devices are passed";
    OciDevice d{n.path, n.major, n.minor, n.file_mode ? (n.file_mode & 07777) : 0666u};
    if (n.major < 0 || n.minor < 0) {
      struct stat st{};
      if (stat(HostOf(n).c_str(), &st) != 0 || !S_ISCHR(st.st_mode))
        return where + ": device node " + HostOf(n) + " is not a character device on this node";
      d.major = major(st.st_rdev);
      d.minor = minor(st.st_rdev);
      if (!n.file_mode) d.file_mode = st.st_mode & 0777;
    }
    plan->devices.push_back(d);
  }
  return "";
}

std::string AddMounts(const CdiEdits& e, const std::string& where, CdiPlan* plan) {
  for (const auto& m : e.mounts) {
    if (!Clean(m.container_path) || UnderRuntimeMounts(m.container_path))
      return where + ": mount target " + m.container_path + " is not a clean path outside /proc, /sys and /dev";
    const bool seen = std::any_of(plan->mounts.begin(), plan->mounts.end(),
                                  [&](const DriverFile& f) { return f.container_path == m.container_path; });
    if (seen) continue;
    std::string resolved;
    bool is_dir = false;
    if (auto why = CheckCdiHostPath(m.host_path, &resolved, &is_dir); !why.empty()) return where + ": mount " + why;
    plan->mounts.push_back({resolved, m.container_path});
    plan->mount_is_dir.push_back(is_dir);
  }
  return "";
}

void AddEnv(const CdiEdits& e, CdiPlan* plan) {
  for (const auto& kv : e.env) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(plan->env, [&](const std::string& have) { return have.rfind(name, 0) == 0; });
    plan->env.push_back(kv);
  }
}

// The toolkit hooks' effects; `soname_dirs` gets the folders whose libraries get SONAME links.
std::string AddHooks(const CdiEdits& e, const std::string& where, CdiPlan* plan, std::set<std::string>* soname_dirs) {
  for (const auto& h : e.hooks) {
    const ToolkitHook t = SplitHook(h);
    if (t.sub == "create-symlinks") {
      for (auto [it, end] = t.flags.equal_range("link"); it != end; ++it) {
        const auto sep = it->second.find("::");
        if (sep == std::string::npos || sep == 0) return where + ": create-symlinks --link '" + it->second + "' is not TARGET::LINK";
        const std::string link = it->second.substr(sep + 2);
        if (!Clean(link)) return where + ": create-symlinks link '" + link + "' is not a clean absolute path";
        if (!UnderRuntimeMounts(link)) plan->symlinks.push_back({link, it->second.substr(0, sep)});
      }
    } else if (t.sub == "update-ldcache" || t.sub == "create-soname-symlinks") {
      for (auto [it, end] = t.flags.equal_range("folder"); it != end; ++it) {
        if (!Clean(it->second)) return where + ": " + t.sub + " --folder '" + it->second + "' is not a clean absolute path";
        soname_dirs->insert(it->second);
        if (t.sub == "update-ldcache" &&
            std::find(plan->library_dirs.begin(), plan->library_dirs.end(), it->second) == plan->library_dirs.end())
          plan->library_dirs.push_back(it->second);
      }
    }
  }
  return "";
}

// ldconfig's SONAME links for the mounted libraries in `dirs`: DIR/libcuda.so.1 -> libcuda.so.535.104.05.
void AddSonameLinks(const CdiCatalog& catalog, const std::set<std::string>& dirs, CdiPlan* plan) {
  std::set<std::string> taken;
  for (const auto& m : plan->mounts) taken.insert(m.container_path);
  for (const auto& s : plan->symlinks) taken.insert(s.link);
  for (size_t i = 0; i < plan->mounts.size(); ++i) {
    const auto& m = plan->mounts[i];
    const std::string dir = Dirname(m.container_path);
    if (plan->mount_is_dir[i] || !dirs.count(dir)) continue;
    for (auto [it, end] = catalog.sonames.equal_range(m.host_path); it != end; ++it) {
      const std::string link = dir + "/" + it->second;
      if (it->second == Basename(m.container_path) || !taken.insert(link).second) continue;
      plan->symlinks.push_back({link, Basename(m.container_path)});
    }
  }
}

}  // namespace

CdiCatalog MakeCdiCatalog(std::vector<CdiSpec> specs, const std::vector<LdCacheEntry>& ld_cache) {
  CdiCatalog c;
  for (auto& s : specs)
    if (s.kind == kCdiGpuKind) c.specs.push_back(std::move(s));
  if (c.specs.empty()) return c;
  for (const auto& e : ld_cache) {
    char buf[PATH_MAX];
    if (e.name.find('/') == std::string::npos && realpath(e.path.c_str(), buf)) c.sonames.emplace(buf, e.name);
  }
  return c;
}

std::string CheckCdiHostPath(const std::string& path, std::string* resolved, bool* is_dir) {
  char buf[PATH_MAX];
  if (!realpath(path.c_str(), buf)) return path + ": cannot resolve it";
  struct stat st{};
  if (lstat(buf, &st) != 0) return std::string(buf) + ": cannot stat it";
  if (st.st_uid != 0) return std::string(buf) + ": not owned by root";
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISSOCK(st.st_mode))
    return std::string(buf) + ": not a regular file, directory or socket";
  if (!S_ISSOCK(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH))) return std::string(buf) + ": writable by group or others";
  *resolved = buf;
  *is_dir = S_ISDIR(st.st_mode);
  return "";
}

Parsed<CdiPlan> PlanCdi(const CdiCatalog& catalog, const std::vector<std::string>& gpus,
                        const std::vector<std::string>& denied) {
  Parsed<CdiPlan> out;
  const std::set<std::string> deny(denied.begin(), denied.end());
  std::vector<std::pair<const CdiSpec*, const CdiDevice*>> chosen;
  for (const auto& gpu : gpus) {
    std::pair<const CdiSpec*, const CdiDevice*> best{nullptr, nullptr};
    for (const auto& spec : catalog.specs)
      for (const auto& dev : spec.devices) {
        const auto& nodes = dev.edits.device_nodes;
        if (std::none_of(nodes.begin(), nodes.end(), [&](const CdiDeviceNode& n) { return HostOf(n) == gpu; })) continue;
        if (!best.second || nodes.size() < best.second->edits.device_nodes.size()) best = {&spec, &dev};
      }
    if (!best.second) {
      out.error = "no CDI device of kind " + std::string(kCdiGpuKind) + " has the device node " + gpu;
      return out;
    }
    for (const auto& n : best.second->edits.device_nodes)
      if (deny.count(HostOf(n))) {
        out.error = best.first->file + ": CDI device " + best.second->name + " also holds " + HostOf(n) + ", another task's GPU";
        return out;
      }
    if (std::find(chosen.begin(), chosen.end(), best) == chosen.end()) chosen.push_back(best);
  }
  // The specs' common edits first (each once), then each device's.
  std::vector<std::pair<std::string, const CdiEdits*>> edits;
  std::set<const CdiSpec*> specs;
  for (const auto& [spec, dev] : chosen)
    if (specs.insert(spec).second) edits.emplace_back(spec->file + ": containerEdits", &spec->edits);
  for (const auto& [spec, dev] : chosen) edits.emplace_back(spec->file + ": device " + dev->name, &dev->edits);
  CdiPlan plan;
  std::set<std::string> soname_dirs;
  for (const auto& [where, e] : edits) {
    std::string err = AddDevices(*e, where, &plan);
    if (err.empty()) err = AddMounts(*e, where, &plan);
    if (err.empty()) err = AddHooks(*e, where, &plan, &soname_dirs);
    if (!err.empty()) {
      out.error = err;
      return out;
    }
    AddEnv(*e, &plan);
  }
  AddSonameLinks(catalog, soname_dirs, &plan);
  out.value = std::move(plan);
  return out;
}

std::vector<std::string> UnsupportedHooks(const CdiCatalog& catalog) {
  std::vector<std::string> out;
  auto check = [&](const CdiEdits& e, const std::string& where) {
    for (const auto& h : e.hooks) {
      const ToolkitHook t = SplitHook(h);
      if (Reproduced(t.sub)) continue;
      std::string line = where + ": " + h.hook_name + " hook " + h.path;
      for (size_t i = 1; i < h.args.size() && i < 4; ++i) line += " " + h.args[i];
      out.push_back(line);
    }
  };
  for (const auto& s : catalog.specs) {
    check(s.edits, s.file + ": containerEdits");
    for (const auto& d : s.devices) check(d.edits, s.file + ": device " + d.name);
  }
  return out;
}

void ApplyCdiPlan(const CdiPlan& plan, OciTaskSpec* spec, std::vector<MountPoint>* points) {
  spec->devices = plan.devices;
  for (size_t i = 0; i < plan.mounts.size(); ++i) {
    spec->binds.push_back({plan.mounts[i].host_path, plan.mounts[i].container_path, true});
    points->push_back({plan.mounts[i].container_path, plan.mount_is_dir[i]});
  }
  for (const auto& s : plan.symlinks) points->push_back({s.link, false, s.target});
  for (const auto& kv : plan.env) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(spec->env, [&](const std::string& have) { return have.rfind(name, 0) == 0; });
    spec->env.push_back(kv);
  }
  for (const auto& dir : plan.library_dirs) {
    auto it = std::find_if(spec->env.begin(), spec->env.end(),
                           [](const std::string& kv) { return kv.rfind("LD_LIBRARY_PATH=", 0) == 0; });
    if (it == spec->env.end()) {
      spec->env.push_back("LD_LIBRARY_PATH=" + dir);
    } else if ((":" + it->substr(16) + ":").find(":" + dir + ":") == std::string::npos) {
      *it += (it->size() == 16 ? "" : ":") + dir;
    }
  }
}

}  // namespace mlsched::agent
