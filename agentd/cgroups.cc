#include "agentd/cgroups.h"
#include "agentd/device_filter.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace mlsched::agent {
namespace {

constexpr int64_t kCpuPeriodUs = 100000;  // CFS period for the quota: 100 ms
constexpr std::string_view kAgentLeaf = "agentd";  // v2: where agentd moves itself to delegate

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// Writes `value` to a cgroup file in one write(2); "" or an error naming the file.
std::string WriteFile(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path, errno);
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) return Errno("write " + value + " to " + path, n < 0 ? err : EIO);
  return "";
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// The value of "KEY N" in a flat-keyed cgroup file (memory.events, memory.oom_control).
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string k; in >> k;) {
    int64_t v = 0;
    if (!(in >> v)) break;
    if (k == key) return v;
  }
  return 0;
}

std::string MakeDir(const std::string& dir, bool exist_ok) {
  if (mkdir(dir.c_str(), 0755) == 0 || (exist_ok && errno == EEXIST)) return "";
  return Errno("mkdir " + dir, errno);
}

// Sub-directory names of `dir`.
std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  return out;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return std::stoll(std::string(s));
}

// "<job>.<attempt>/rank<r>" -> the task.
std::optional<TaskKey> ParseTaskDir(std::string_view rel) {
  size_t slash = rel.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string_view attempt = rel.substr(0, slash), rank = rel.substr(slash + 1);
  size_t dot = attempt.find('.');
  if (dot == std::string_view::npos || rank.substr(0, 4) != "rank") return std::nullopt;
  auto j = ParseInt(attempt.substr(0, dot)), a = ParseInt(attempt.substr(dot + 1)), r = ParseInt(rank.substr(4));
  if (!j || !a || !r) return std::nullopt;
  return TaskKey{*j, static_cast<int32_t>(*a), static_cast<int32_t>(*r)};
}

std::string TaskDirName(const TaskKey& key) { return key.Attempt().ToString() + "/rank" + std::to_string(key.rank); }

}  // namespace

std::string OutOfMemoryError(int64_t limit_bytes, int64_t kills) {
  std::string limit = limit_bytes % (int64_t{1} << 20) == 0 ? std::to_string(limit_bytes >> 20) + " MiB"
                                                              : std::to_string(limit_bytes) + " bytes";
  return "OUT_OF_MEMORY: task used more than its " + limit + " memory limit (" + std::to_string(kills) +
         (kills == 1 ? " process" : " processes") + " killed by the kernel's OOM killer)";
}

// ---- TaskCgroup ----

TaskCgroup::~TaskCgroup() { CloseJoinFds(); }

void TaskCgroup::CloseJoinFds() {
  for (int fd : join_fds_) close(fd);
  join_fds_.clear();
}

namespace {
// The cgroups below `dir` (a container runtime makes one for its container), deepest first.
void SubCgroups(const std::string& dir, std::vector<std::string>* out, int depth = 0) {
  if (depth > 8) return;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    SubCgroups(e.path().string(), out, depth + 1);
    out->push_back(e.path().string());
  }
}
}  // namespace

std::vector<pid_t> TaskCgroup::Pids() const {
  std::vector<pid_t> out;
  std::vector<std::string> dirs;
  SubCgroups(track_dir_, &dirs);
  dirs.push_back(track_dir_);
  for (const auto& d : dirs) {
    std::istringstream in(ReadFile(d + "/cgroup.procs").value_or(""));
    for (long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

int64_t TaskCgroup::OomKills() const {
  if (memory_dir_.empty()) return 0;
  const char* file = version_ == 2 ? "/memory.events" : "/memory.oom_control";
  return KeyedValue(ReadFile(memory_dir_ + file).value_or(""), "oom_kill");
}

std::optional<int64_t> TaskCgroup::CpuUsec() const {
  if (cpu_dir_.empty()) return std::nullopt;
  if (version_ == 2) {
    auto text = ReadFile(cpu_dir_ + "/cpu.stat");
    if (!text || text->find("usage_usec") == std::string::npos) return std::nullopt;
    return KeyedValue(*text, "usage_usec");
  }
  auto text = ReadFile(cpu_dir_ + "/cpuacct.usage");
  if (!text) return std::nullopt;
  try {
    return static_cast<int64_t>(std::stoull(*text) / 1000);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

TaskCgroup::MemoryUse TaskCgroup::Memory() const {
  MemoryUse m;
  if (memory_dir_.empty()) return m;
  if (auto stat = ReadFile(memory_dir_ + "/memory.stat"))
    m.rss = KeyedValue(*stat, version_ == 2 ? "anon" : "total_rss");
  if (auto peak = ReadFile(memory_dir_ + (version_ == 2 ? "/memory.peak" : "/memory.max_usage_in_bytes"))) {
    try {
      m.peak = std::stoll(*peak);
    } catch (const std::exception&) {
    }
  }
  return m;
}

bool TaskCgroup::HitMemoryLimit() const {
  if (memory_dir_.empty() || memory_limit_ <= 0) return false;
  if (version_ == 2) return KeyedValue(ReadFile(memory_dir_ + "/memory.events").value_or(""), "max") > 0;
  for (const char* f : {"/memory.memsw.max_usage_in_bytes", "/memory.max_usage_in_bytes"}) {
    auto text = ReadFile(memory_dir_ + f);
    if (!text) continue;
    try {
      if (std::stoll(*text) >= memory_limit_ - 4096 * 16) return true;  // within 16 pages: v1 charges in batches
    } catch (const std::exception&) {
    }
  }
  return false;
}

bool TaskCgroup::Freeze(bool frozen) const {
  if (freezer_dir_.empty()) return false;
  const bool v2 = version_ == 2;
  std::string file = freezer_dir_ + (v2 ? "/cgroup.freeze" : "/freezer.state");
  if (!WriteFile(file, v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED")).empty()) return false;
  if (!frozen) return true;
  // Freezing completes asynchronously: wait (up to 1 s) until every member is frozen.
  for (int i = 0; i < 1000; ++i) {
    auto text = ReadFile(v2 ? freezer_dir_ + "/cgroup.events" : file).value_or("");
    if (v2 ? KeyedValue(text, "frozen") == 1 : text.rfind("FROZEN", 0) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void TaskCgroup::KillAll() const {
  if (Pids().empty()) return;
  if (version_ == 2 && has_kill_) {
    if (auto err = WriteFile(track_dir_ + "/cgroup.kill", "1"); err.empty()) return;
  }
  // A frozen cgroup cannot fork while its members are listed; without a freezer, repeat a few
  // rounds (the pids limit bounds how many new processes each round can find).
  const bool frozen = Freeze(true);
  for (int round = 0; round < (frozen ? 1 : 20); ++round) {
    auto pids = Pids();
    if (pids.empty()) break;
    // Signal through pidfds, and only processes still members once their pidfd is open: a pid
    // that exited and was reused by an unrelated process in between is never signalled.
    std::vector<std::pair<pid_t, int>> open;
    for (pid_t p : pids) {
      int fd = static_cast<int>(syscall(SYS_pidfd_open, p, 0));
      if (fd >= 0) open.push_back({p, fd});
    }
    auto still = Pids();
    std::set<pid_t> members(still.begin(), still.end());
    for (auto [pid, fd] : open) {
      if (members.count(pid)) syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
      close(fd);
    }
    if (!frozen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (frozen) Freeze(false);
}

bool TaskCgroup::Remove() {
  for (const auto& d : dirs_) {
    std::vector<std::string> below;  // what a container runtime left
    SubCgroups(d, &below);
    for (const auto& b : below) rmdir(b.c_str());
    if (rmdir(d.c_str()) != 0 && errno != ENOENT) return false;
  }
  for (const auto& d : attempt_dirs_) rmdir(d.c_str());  // busy while other ranks are there
  return true;
}

// ---- Cgroups ----

Cgroups::Cgroups(CgroupLayout layout, std::string base) : layout_(std::move(layout)), base_(std::move(base)) {
  if (layout_.version == 1) track_controller_ = layout_.v1_dirs.count("freezer") ? "freezer" : layout_.v1_dirs.begin()->first;
  // Already moved into its leaf by an earlier Init() of this process: the cgroup it left is agentd's.
  if (layout_.version == 2 && layout_.v2_dir.size() > kAgentLeaf.size() + 1 &&
      layout_.v2_dir.ends_with("/" + std::string(kAgentLeaf))) {
    layout_.v2_dir.resize(layout_.v2_dir.size() - kAgentLeaf.size() - 1);
    std::string& path = layout_.paths[""];
    if (path.ends_with("/" + std::string(kAgentLeaf))) path.resize(path.size() - kAgentLeaf.size() - 1);
    if (path.empty()) path = "/";
  }
}

std::string Cgroups::BaseName(const std::string& node, const std::string& work_dir) {
  std::error_code ec;
  std::string dir = std::filesystem::weakly_canonical(work_dir, ec).string();
  if (ec) dir = work_dir;
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : dir) h = (h ^ c) * 16777619u;
  std::string name = "mlsched-";
  for (char c : node) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  char hex[16];
  std::snprintf(hex, sizeof hex, "-%08x", h);
  return name + hex;
}

std::vector<std::string> Cgroups::BaseDirs() const {
  std::vector<std::string> out;
  if (layout_.version == 2) out.push_back(layout_.v2_dir + "/" + base_);
  for (const auto& [c, dir] : layout_.v1_dirs)
    if (std::find(out.begin(), out.end(), dir + "/" + base_) == out.end()) out.push_back(dir + "/" + base_);
  return out;
}

std::string Cgroups::DirOf(const std::string& controller, const TaskKey& key) const {
  if (layout_.version == 2) return layout_.v2_dir + "/" + base_ + "/" + TaskDirName(key);
  auto it = layout_.v1_dirs.find(controller);
  return it == layout_.v1_dirs.end() ? "" : it->second + "/" + base_ + "/" + TaskDirName(key);
}

std::vector<std::string> Cgroups::DirsOf(const TaskKey& key) const { return Paths(key)->dirs_; }

std::unique_ptr<TaskCgroup> Cgroups::Paths(const TaskKey& key) const {
  std::unique_ptr<TaskCgroup> cg(new TaskCgroup());
  cg->version_ = layout_.version;
  for (const auto& base : BaseDirs()) {
    cg->dirs_.push_back(base + "/" + TaskDirName(key));
    cg->attempt_dirs_.push_back(base + "/" + key.Attempt().ToString());
  }
  if (layout_.version == 2) {
    cg->track_dir_ = cg->dirs_.front();
    if (layout_.Has("memory")) cg->memory_dir_ = cg->track_dir_;
    if (layout_.Has("kill") || layout_.Has("freeze")) cg->freezer_dir_ = cg->track_dir_;
    cg->has_kill_ = layout_.Has("kill");
    cg->cpu_dir_ = cg->track_dir_;
  } else {
    cg->cpu_dir_ = DirOf("cpuacct", key);
    if (cg->cpu_dir_.empty()) cg->cpu_dir_ = DirOf("cpu", key);  // "cpu,cpuacct" mounted together
    cg->track_dir_ = DirOf(track_controller_, key);
    cg->memory_dir_ = DirOf("memory", key);
    cg->freezer_dir_ = DirOf("freezer", key);
  }
  return cg;
}

std::unique_ptr<TaskCgroup> Cgroups::Attach(const TaskKey& key) const {
  if (layout_.version == 0) return nullptr;
  auto cg = Paths(key);
  struct stat st{};
  if (cg->track_dir_.empty() || stat(cg->track_dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return nullptr;
  if (!cg->memory_dir_.empty()) {
    const std::string file = cg->memory_dir_ + (layout_.version == 2 ? "/memory.max" : "/memory.limit_in_bytes");
    const std::string text = ReadFile(file).value_or("");
    try {
      const long long v = std::stoll(text);
      if (v > 0 && v < (int64_t{1} << 60)) cg->memory_limit_ = v;  // "max" or v1's huge value: none
    } catch (const std::exception&) {
    }
  }
  return cg;
}

std::string Cgroups::EnableV2Controllers() {
  std::string ctl;
  for (const char* c : {"memory", "cpu", "pids"})
    if (layout_.Has(c)) ctl += std::string(ctl.empty() ? "+" : " +") + c;
  if (ctl.empty()) return "";
  const std::string own = layout_.v2_dir;
  if (auto err = WriteFile(own + "/cgroup.subtree_control", ctl); !err.empty()) {
    // "No internal processes": a non-root cgroup with members cannot delegate. Move agentd into a
    // leaf of its own cgroup and try again.
    const std::string leaf = own + "/" + std::string(kAgentLeaf);
    if (auto e = MakeDir(leaf, true); !e.empty()) return e;
    if (auto e = WriteFile(leaf + "/cgroup.procs", "0"); !e.empty()) return e;
    spdlog::info("cgroups: moved agentd into {} to delegate controllers", leaf);
    if (auto e = WriteFile(own + "/cgroup.subtree_control", ctl); !e.empty())
      return e + " (other processes share agentd's cgroup: run agentd in a cgroup of its own, e.g. systemd "
                 "Delegate=yes)";
  }
  return WriteFile(layout_.v2_dir + "/" + base_ + "/cgroup.subtree_control", ctl);
}

std::string Cgroups::Init(const std::set<TaskKey>& keep) {
  if (layout_.version == 0) return "";
  for (const auto& d : BaseDirs())
    if (auto err = MakeDir(d, true); !err.empty()) return err;
  if (layout_.version == 2) {
    if (auto err = EnableV2Controllers(); !err.empty()) return err;
    if (CanFilterDevices()) layout_.controllers.insert("devices");  // an eBPF program per task cgroup
  }
  if (int left = Clear(2000, false, keep)) spdlog::warn("cgroups: {} stale task cgroup(s) could not be removed", left);
  return "";
}

std::string Cgroups::WriteLimits(const TaskKey& key, const TaskLimits& limits) const {
  const bool v2 = layout_.version == 2;
  auto dir = [&](const char* controller) { return layout_.Has(controller) ? DirOf(v2 ? "" : controller, key) : ""; };
  struct Write {
    std::string file, value;
    bool required = true;  // else a failure is logged and the task runs without that limit
  };
  std::vector<Write> writes;  // in this order
  if (std::string d = dir("memory"); !d.empty() && limits.memory_bytes > 0) {
    std::string bytes = std::to_string(limits.memory_bytes);
    // No swapping past the limit either: memory+swap gets the same limit on v1, swap 0 on v2.
    writes.push_back({d + (v2 ? "/memory.max" : "/memory.limit_in_bytes"), bytes});
    if (!v2 && Exists(d + "/memory.memsw.limit_in_bytes")) writes.push_back({d + "/memory.memsw.limit_in_bytes", bytes});
    if (v2 && Exists(d + "/memory.swap.max")) writes.push_back({d + "/memory.swap.max", "0"});
  }
  if (std::string d = dir("cpu"); !d.empty() && limits.cpu_millis > 0) {
    std::string quota = std::to_string(std::max<int64_t>(1000, limits.cpu_millis * kCpuPeriodUs / 1000));
    if (v2) {
      writes.push_back({d + "/cpu.weight", std::to_string(std::clamp<int64_t>(limits.cpu_millis / 10, 1, 10000))});
      writes.push_back({d + "/cpu.max", quota + " " + std::to_string(kCpuPeriodUs)});
    } else {
      writes.push_back({d + "/cpu.shares", std::to_string(std::max<int64_t>(2, limits.cpu_millis * 1024 / 1000))});
      // v1 refuses a quota above an ancestor's (agentd in a CPU-limited container): weight only then.
      writes.push_back({d + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs), false});
      writes.push_back({d + "/cpu.cfs_quota_us", quota, false});
    }
  }
  if (std::string d = dir("pids"); !d.empty() && limits.pids_max > 0)
    writes.push_back({d + "/pids.max", std::to_string(limits.pids_max)});
  std::vector<DeviceId> denied;  // a missing device node cannot be opened anyway
  for (const auto& path : limits.deny_devices)
    if (DeviceId dev; DeviceOf(path, &dev) && std::find(denied.begin(), denied.end(), dev) == denied.end())
      denied.push_back(dev);
  std::string devices = dir("devices");
  if (!devices.empty() && !v2)
    for (const auto& d : denied)
      writes.push_back({devices + "/devices.deny", std::string(d.block ? "b " : "c ") + std::to_string(d.major) + ":" +
                                                       std::to_string(d.minor) + " rwm"});
  for (const auto& w : writes) {
    std::string err = WriteFile(w.file, w.value);
    if (err.empty()) continue;
    if (w.required) return err;
    spdlog::warn("task {}: {} (this limit is not applied)", key.ToString(), err);
  }
  if (!devices.empty() && v2 && !denied.empty()) return AttachDeviceDenyProgram(devices, denied);
  return "";
}

Parsed<std::unique_ptr<TaskCgroup>> Cgroups::Create(const TaskKey& key, const TaskLimits& limits) const {
  Parsed<std::unique_ptr<TaskCgroup>> out;
  auto cg = Paths(key);
  std::string ctl;  // v2: the attempt directory delegates the controllers to its ranks
  for (const char* c : {"memory", "cpu", "pids"})
    if (layout_.version == 2 && layout_.Has(c)) ctl += std::string(ctl.empty() ? "+" : " +") + c;
  std::string err;
  for (size_t i = 0; i < cg->dirs_.size() && err.empty(); ++i) {
    err = MakeDir(cg->attempt_dirs_[i], true);
    if (err.empty() && !ctl.empty()) err = WriteFile(cg->attempt_dirs_[i] + "/cgroup.subtree_control", ctl);
    if (err.empty()) err = MakeDir(cg->dirs_[i], false);
    if (!err.empty()) cg->dirs_.resize(i);  // remove only what was made here
  }
  if (err.empty()) err = WriteLimits(key, limits);
  for (size_t i = 0; i < cg->dirs_.size() && err.empty(); ++i) {
    std::string procs = cg->dirs_[i] + "/cgroup.procs";
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) err = Errno("open " + procs, errno);
    else cg->join_fds_.push_back(fd);
  }
  if (!err.empty()) {
    cg->CloseJoinFds();
    cg->Remove();
    out.error = "cgroup: " + err;
    return out;
  }
  cg->memory_limit_ = cg->memory_dir_.empty() ? 0 : limits.memory_bytes;
  out.value = std::move(cg);
  return out;
}

std::optional<TaskKey> Cgroups::TaskOfCgroupFile(const std::string& proc_cgroup) const {
  if (layout_.version == 0) return std::nullopt;
  const std::string hierarchy = layout_.version == 2 ? "" : track_controller_;
  auto own = layout_.paths.find(hierarchy);
  if (own == layout_.paths.end()) return std::nullopt;
  std::string prefix = (own->second == "/" ? "" : own->second) + "/" + base_ + "/";
  std::istringstream in(proc_cgroup);
  for (std::string line; std::getline(in, line);) {
    size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    bool match = hierarchy.empty() ? controllers == ",," : controllers.find("," + hierarchy + ",") != std::string::npos;
    if (!match) continue;
    std::string path = line.substr(b + 1);
    if (path.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    return ParseTaskDir(std::string_view(path).substr(prefix.size()));
  }
  return std::nullopt;
}

std::optional<TaskKey> Cgroups::TaskOf(pid_t pid) const {
  auto text = ReadFile("/proc/" + std::to_string(pid) + "/cgroup");
  return text ? TaskOfCgroupFile(*text) : std::nullopt;
}

int Cgroups::Clear(int wait_ms, bool remove_base, const std::set<TaskKey>& keep) {
  std::set<TaskKey> keys;
  for (const auto& base : BaseDirs())
    for (const auto& attempt : SubDirs(base)) {
      for (const auto& rank : SubDirs(base + "/" + attempt))
        if (auto key = ParseTaskDir(attempt + "/" + rank); key && !keep.count(*key)) keys.insert(*key);
      rmdir((base + "/" + attempt).c_str());  // an empty attempt directory
    }
  std::vector<std::unique_ptr<TaskCgroup>> left;
  for (const auto& key : keys) {
    auto cg = Paths(key);
    if (!cg->Pids().empty()) spdlog::info("cgroups: killing the processes left in {}", cg->Dir());
    cg->KillAll();
    if (!cg->Remove()) left.push_back(std::move(cg));
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::erase_if(left, [](auto& cg) {
      cg->KillAll();
      return cg->Remove();
    });
  }
  for (const auto& cg : left) spdlog::warn("cgroups: cannot remove {}: processes remain", cg->Dir());
  if (remove_base)
    for (const auto& base : BaseDirs()) rmdir(base.c_str());
  return static_cast<int>(left.size());
}

}  // namespace mlsched::agent
