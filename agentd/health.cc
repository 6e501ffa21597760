#include "agentd/health.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "agentd/container_tools.h"
#include "agentd/metrics.h"
#include "agentd/nvml.h"
#include "mlsched/v1/agent.pb.h"

namespace mlsched::agent {

namespace {

std::string Gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return buf;
}

HealthProblem Problem(std::string check, std::string reason) {
  if (reason.size() > kMaxHealthReasonBytes) reason.resize(kMaxHealthReasonBytes);
  return {std::move(check), std::move(reason)};
}

// What an Xid is called where the catalog's name helps an operator (NVIDIA, Xid catalog).
std::string XidName(int32_t code) {
  switch (code) {
    case 48: return "double-bit ECC error";
    case 63: return "ECC page retirement or row remapping";
    case 64: return "ECC page retirement or row remapping failure";
    case 74: return "NVLink error";
    case 79: return "fallen off the bus";
    case 92: return "high single-bit ECC error rate";
    case 94: return "contained ECC error";
    case 95: return "uncontained ECC error";
    case 119: case 120: return "GSP error";
    case 140: return "unrecovered ECC error";
    default: return "";
  }
}

}  // namespace

std::optional<HealthProblem> CheckFreeSpace(const std::string& dir, uint64_t min_free_bytes) {
  struct statvfs st {};
  if (min_free_bytes == 0 || statvfs(dir.c_str(), &st) != 0) return std::nullopt;
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (free_bytes >= min_free_bytes) return std::nullopt;
  return Problem("disk", dir + ": " + Gib(free_bytes) + " free, below the minimum of " + Gib(min_free_bytes));
}

std::optional<HealthProblem> CheckClock(int64_t sent_ms, int64_t received_ms, int64_t server_s, int64_t max_skew_s) {
  if (max_skew_s <= 0 || server_s <= 0 || received_ms < sent_ms) return std::nullopt;
  const int64_t middle_ms = sent_ms + (received_ms - sent_ms) / 2;
  const int64_t offset_ms = server_s * 1000 - middle_ms;         // schedd minus this node
  const int64_t error_ms = (received_ms - sent_ms) / 2 + 1000;   // half the round trip + whole seconds
  if (std::abs(offset_ms) - error_ms <= max_skew_s * 1000) return std::nullopt;
  const int64_t off_s = std::abs(offset_ms) / 1000;
  return Problem("clock", "clock " + std::to_string(off_s) + " s " + (offset_ms > 0 ? "behind" : "ahead of") +
                              " schedd's (more than " + std::to_string(max_skew_s) + " s allowed; is NTP running?)");
}

std::string AdminProgramUnsafe(const std::string& path, uid_t owner) {
  if (path.empty() || path[0] != '/') return "not an absolute path";
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (!(st.st_mode & S_IXUSR)) return "not executable";
  // The file and every directory above it: anyone who may change one of them decides what runs.
  // A sticky directory (/tmp) is fine: others may not rename or remove what they do not own.
  std::string at = path;
  for (;;) {
    struct stat s {};
    if (stat(at.c_str(), &s) != 0) return at + ": cannot stat: " + std::strerror(errno);
    if (s.st_uid != 0 && s.st_uid != owner) return at + " is owned by uid " + std::to_string(s.st_uid) + ", not root";
    const bool others_write = (s.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_write && !(S_ISDIR(s.st_mode) && (s.st_mode & S_ISVTX))) return at + " is writable by group or others";
    if (at == "/") break;
    const size_t slash = at.find_last_of('/');
    at = slash == 0 ? "/" : at.substr(0, slash);
  }
  return "";
}

std::optional<HealthProblem> RunHealthProgram(const std::string& path, std::chrono::seconds timeout,
                                              const std::atomic<bool>* cancel) {
  if (std::string why = AdminProgramUnsafe(path, geteuid()); !why.empty())
    return Problem("program", "health program " + path + " refused: " + why);
  ToolResult r = RunTool({path}, {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"},
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout), 4096, nullptr, cancel);
  if (r.Ok()) return std::nullopt;
  if (!r.error.empty()) return Problem("program", "health program " + path + ": " + r.error);
  if (r.timed_out) return Problem("program", "health program " + path + " did not finish in " + std::to_string(timeout.count()) + " s");
  // NHC prints "ERROR:  nhc:  Health check failed:  REASON": its first line that says something.
  std::string first;
  size_t pos = 0;
  while (pos < r.output.size() && first.empty()) {
    size_t nl = r.output.find('\n', pos);
    if (nl == std::string::npos) nl = r.output.size();
    first = r.output.substr(pos, nl - pos);
    first.erase(0, first.find_first_not_of(" \t\r"));
    while (!first.empty() && (first.back() == ' ' || first.back() == '\r' || first.back() == '\t')) first.pop_back();
    pos = nl + 1;
  }
  for (char& c : first)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (first.empty()) first = "health program " + path + " exited " + std::to_string(r.exit_code);
  return Problem("program", first);
}

std::string SummarizeProblems(const std::vector<HealthProblem>& problems, size_t max_bytes) {
  std::string out;
  for (const auto& p : problems) out += (out.empty() ? "" : "; ") + p.check + ": " + p.reason;
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

HealthMonitor::HealthMonitor(HealthConfig cfg, const Nvml* nvml, std::string nvml_error, AgentMetrics* metrics)
    : cfg_(std::move(cfg)), nvml_(nvml), nvml_error_(std::move(nvml_error)), metrics_(metrics) {
  if (cfg_.kmsg != "none" && !cfg_.kmsg.empty()) kmsg_ = std::make_unique<KmsgReader>(cfg_.kmsg);
}

HealthMonitor::~HealthMonitor() { Stop(); }

void HealthMonitor::Start() {
  if (!Enabled() || thread_.joinable()) return;
  if (!cfg_.program.empty())
    if (std::string why = AdminProgramUnsafe(cfg_.program, geteuid()); !why.empty())
      spdlog::error("health program {} will not run: {} (the node reports it as failing)", cfg_.program, why);
  thread_ = std::thread([this] { Loop(); });
}

void HealthMonitor::Stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::Loop() {
  Round();  // the first round at once, on this thread (a slow program never delays agentd's start)
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, cfg_.interval, [&] { return stop_.load(); })) {
    lk.unlock();
    Round();
    lk.lock();
  }
}

std::vector<HealthProblem> HealthMonitor::GpuProblems() const {
  std::vector<HealthProblem> out;
  if (cfg_.expected_gpus <= 0) return out;
  if (!nvml_) {
    if (!nvml_error_.empty()) out.push_back(Problem("gpu", "NVML unusable: " + nvml_error_));
    return out;
  }
  std::string why;
  if (auto n = nvml_->CountNow(&why); !n) {
    out.push_back(Problem("gpu", "NVML: " + why));
    return out;
  } else if (static_cast<int32_t>(*n) < cfg_.expected_gpus) {
    out.push_back(Problem("gpu", std::to_string(*n) + " of the " + std::to_string(cfg_.expected_gpus) +
                                     " GPUs registered are visible to NVML"));
  }
  for (int32_t i = 0; i < cfg_.expected_gpus && out.size() < kMaxHealthProblems; ++i) {
    const Nvml::DeviceHealth h = nvml_->Health(i);
    const std::string gpu = "GPU " + std::to_string(i);
    if (!h.error.empty()) {
      out.push_back(Problem("gpu", gpu + ": " + h.error));
      continue;
    }
    if (h.ecc_uncorrected && *h.ecc_uncorrected > 0)
      out.push_back(Problem("ecc", gpu + ": " + std::to_string(*h.ecc_uncorrected) + " uncorrectable ECC error(s)"));
    if (h.retired_pages_pending) out.push_back(Problem("ecc", gpu + ": memory pages pending retirement (reset the GPU)"));
    if (h.row_remap_failure) out.push_back(Problem("ecc", gpu + ": row remapping failed"));
  }
  return out;
}

void HealthMonitor::ScanKernelLog() {
  if (!kmsg_) return;
  std::string error;
  for (const std::string& rec : kmsg_->Read(&error)) {
    auto x = ParseXid(rec);
    if (!x || !cfg_.fatal_xids.count(x->code)) continue;
    const int32_t index = nvml_ ? nvml_->IndexOfPci(x->domain, x->bus, x->device) : -1;
    char addr[32];
    std::snprintf(addr, sizeof addr, "%04x:%02x:%02x", x->domain, x->bus, x->device);
    const std::string gpu = index >= 0 ? "GPU " + std::to_string(index) : std::string("GPU at PCI ") + addr;
    const std::string key = gpu + " XID " + std::to_string(x->code);
    if (xids_.count(key) || xids_.size() >= kMaxHealthProblems) continue;
    std::string name = XidName(x->code);
    if (name.empty()) name = x->text;
    xids_[key] = Problem("xid", key + (name.empty() ? "" : " (" + name + ")"));
    spdlog::error("health: kernel log: {}", xids_[key].reason);
  }
  if (!error.empty() && !kmsg_warned_) {
    spdlog::warn("health: {}; no Xid check until it can be read", error);
    kmsg_warned_ = true;
  } else if (error.empty()) {
    kmsg_warned_ = false;
  }
}

std::vector<HealthProblem> HealthMonitor::QuickProblems() {
  std::vector<HealthProblem> out;
  {
    std::lock_guard lk(kmsg_mu_);
    ScanKernelLog();
    for (const auto& [key, p] : xids_) out.push_back(p);
  }
  for (const auto& dir : cfg_.disk_dirs)
    if (auto p = CheckFreeSpace(dir, cfg_.min_free_bytes)) out.push_back(*p);
  return out;
}

void HealthMonitor::Round() {
  std::vector<HealthProblem> slow = GpuProblems();
  if (!cfg_.program.empty())
    if (auto p = RunHealthProgram(cfg_.program, cfg_.program_timeout, &stop_)) slow.push_back(*p);
  std::vector<HealthProblem> all = QuickProblems();
  all.insert(all.begin(), slow.begin(), slow.end());
  std::lock_guard lk(mu_);
  if (clock_) all.push_back(*clock_);
  if (all.size() > kMaxHealthProblems) all.resize(kMaxHealthProblems);
  if (all != verdict_) {
    if (all.empty()) spdlog::info("health: every check passes again");
    else spdlog::error("health: failing: {}", SummarizeProblems(all));
  }
  if (metrics_) {
    std::set<std::string> failed;
    for (const auto& p : all) failed.insert(p.check);
    for (const auto& c : failed) metrics_->CountHealthFailure(c);
    metrics_->SetHealthy(all.empty());
  }
  slow_ = std::move(slow);
  verdict_ = std::move(all);
  checked_at_ = static_cast<int64_t>(std::time(nullptr));
}

std::vector<HealthProblem> HealthMonitor::CheckQuick() {
  if (!Enabled()) return {};
  std::vector<HealthProblem> all = QuickProblems();
  std::lock_guard lk(mu_);
  all.insert(all.begin(), slow_.begin(), slow_.end());
  if (clock_) all.push_back(*clock_);
  return all;
}

void HealthMonitor::ObserveClock(int64_t sent_ms, int64_t received_ms, int64_t server_s) {
  auto p = CheckClock(sent_ms, received_ms, server_s, cfg_.max_clock_skew_s);
  if (p) spdlog::error("health: {}", p->reason);
  std::lock_guard lk(mu_);
  clock_ = std::move(p);
}

void HealthMonitor::Fill(v1::NodeHealth* out) const {
  std::lock_guard lk(mu_);
  if (checked_at_ == 0) return;
  out->set_checked_at(checked_at_);
  for (const auto& p : verdict_) {
    auto* h = out->add_problems();
    h->set_check(p.check);
    h->set_reason(p.reason);
  }
}

std::vector<HealthProblem> HealthMonitor::Problems() const {
  std::lock_guard lk(mu_);
  return verdict_;
}

}  // namespace mlsched::agent
