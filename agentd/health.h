// Node health in agentd (issue 33): built-in checks on an interval and before each prepare, plus
// an administrator's program (Slurm's HealthCheckProgram, LBNL NHC's contract: a non-zero exit
// fails the node, the first line it prints is the reason). The failing checks go to schedd with
// every heartbeat (Heartbeat.health), which drains the node with them as the reason per its
// [health] policy. Checks:
//   gpu    GPUs NVML counts now against the GPUs the node registered; a GPU NVML cannot read
//          (fallen off the bus: NVML_ERROR_GPU_IS_LOST)
//   ecc    uncorrectable ECC errors since the driver loaded, pages pending retirement, a failed
//          row remapping (NVML)
//   xid    an Xid of the fatal list in the kernel log (kmsg.h); stays failed until agentd
//          restarts with a kernel log that no longer holds it (a reboot)
//   disk   free space below the minimum in the work and image-cache directories
//   clock  this node's clock against schedd's at registration (NTP's offset: the server's time
//          against the middle of the round trip, failing only beyond the round trip's own error)
//   program the administrator's --health-program
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agentd/kmsg.h"

namespace mlsched::v1 {
class NodeHealth;
}

namespace mlsched::agent {

class AgentMetrics;
class Nvml;

/// Limits of what one node reports (schedd cuts longer reports to these too).
inline constexpr size_t kMaxHealthProblems = 16;
inline constexpr size_t kMaxHealthReasonBytes = 256;

/// agentd's --health-* flags; durations in seconds.
struct HealthConfig {
  std::chrono::seconds interval{60};         // a round of every check this often; 0 = no checks at all
  std::string program;                       // --health-program: absolute path, root's, not writable by others
  std::chrono::seconds program_timeout{60};  // killed (and failed) after this long
  std::vector<std::string> disk_dirs;        // checked for free space (the agent adds its work and image dirs)
  uint64_t min_free_bytes = uint64_t{512} << 20;  // --health-min-free-mb; 0 = no disk check
  std::string kmsg = "/dev/kmsg";            // --health-kmsg: the kernel log; "none" = no Xid check
  std::set<int32_t> fatal_xids = DefaultFatalXids();
  int64_t max_clock_skew_s = 30;             // --health-max-clock-skew; 0 = no clock check
  int32_t expected_gpus = 0;                 // the GPUs the node registers
};

/// One failing check: `check` one of gpu, ecc, xid, disk, clock, program; `reason` for operators.
struct HealthProblem {
  std::string check;
  std::string reason;
  bool operator==(const HealthProblem&) const = default;
};

/// "disk" problem when `dir`'s file system has less than `min_free_bytes` available to
/// unprivileged users (statvfs f_bavail); nullopt when enough or `dir` cannot be read.
std::optional<HealthProblem> CheckFreeSpace(const std::string& dir, uint64_t min_free_bytes);

/// "clock" problem when schedd's clock (`server_s`, seconds) differs from this node's by more than
/// `max_skew_s` beyond the uncertainty of a registration sent at `sent_ms` and answered at
/// `received_ms` (this node's clock, milliseconds): offset = server - (sent + received) / 2, error
/// bound (received - sent) / 2 + 1 s for the server's whole seconds (NTP, RFC 5905 section 8).
std::optional<HealthProblem> CheckClock(int64_t sent_ms, int64_t received_ms, int64_t server_s, int64_t max_skew_s);

/// Why root must not run `path` as an administrator's program: not absolute, not a regular file,
/// or it or a directory above it not owned by root (or `owner`) or writable by group or others
/// (anyone else could change what root runs). "" when it may run.
std::string AdminProgramUnsafe(const std::string& path, uid_t owner);

/// Runs an NHC-compatible program (no arguments, a minimal environment) at most `timeout`:
/// "program" problem with its first non-empty output line when it exits non-zero, is killed by a
/// signal or times out; nullopt when it exits 0. Refused (a problem) when AdminProgramUnsafe.
std::optional<HealthProblem> RunHealthProgram(const std::string& path, std::chrono::seconds timeout,
                                              const std::atomic<bool>* cancel = nullptr);

/// "CHECK: REASON; CHECK: REASON", at most `max_bytes`.
std::string SummarizeProblems(const std::vector<HealthProblem>& problems, size_t max_bytes = 512);

/// Runs the checks on a thread of its own (a check that blocks, as NVML on a broken GPU or a slow
/// program, never delays a heartbeat) and keeps the last verdict for the heartbeat.
class HealthMonitor {
 public:
  /// `nvml` may be null (no GPUs, no NVML library); `nvml_error` says why NVML is unusable on a
  /// node that has GPUs and a library ("" = none expected). `metrics` may be null. Not owned.
  HealthMonitor(HealthConfig cfg, const Nvml* nvml, std::string nvml_error, AgentMetrics* metrics);
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

  /// Runs a first round now, then one every interval on its own thread. No-op when interval is 0.
  void Start();
  void Stop();
  bool Enabled() const { return cfg_.interval.count() > 0; }
  /// Before a prepare: the quick checks again (disk, kernel log) with the last round's others;
  /// the failing checks (empty = healthy).
  std::vector<HealthProblem> CheckQuick();
  /// A registration's round trip (CheckClock); the verdict holds until the next registration.
  void ObserveClock(int64_t sent_ms, int64_t received_ms, int64_t server_s);
  /// The verdict of the last round for the heartbeat; untouched before the first round.
  void Fill(v1::NodeHealth* out) const;
  /// The failing checks of the last round.
  std::vector<HealthProblem> Problems() const;

 private:
  void Loop();
  void Round();
  std::vector<HealthProblem> GpuProblems() const;
  /// New fatal Xids from the kernel log into xids_ (requires kmsg_mu_).
  void ScanKernelLog();
  std::vector<HealthProblem> QuickProblems();

  HealthConfig cfg_;
  const Nvml* nvml_;
  std::string nvml_error_;
  AgentMetrics* metrics_;
  std::mutex kmsg_mu_;  // guards kmsg_, xids_, kmsg_warned_
  std::unique_ptr<KmsgReader> kmsg_;
  std::map<std::string, HealthProblem> xids_;  // by "GPU i XID n": sticky
  bool kmsg_warned_ = false;
  mutable std::mutex mu_;  // guards the verdict below
  std::vector<HealthProblem> slow_;    // gpu, ecc, program of the last round
  std::vector<HealthProblem> verdict_; // every failing check of the last round
  std::optional<HealthProblem> clock_;
  int64_t checked_at_ = 0;
  std::atomic<bool> stop_{false};
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace mlsched::agent
