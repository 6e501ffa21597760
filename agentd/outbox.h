// Outbox: messages waiting for the stream to schedd.
//
// Reliable reports (task started, task exited, eviction notice) get the next sequence number and
// are written to disk (one file per report, fsync'd, in a root-only directory) before they are
// queued; they stay there until schedd acknowledges them (Ack: every seq <= n is durable at
// schedd). Going online queues every unacknowledged report again, oldest first, ahead of anything
// else; an agent restart loads them from disk. schedd handles repeats idempotently, so a report is
// acted on exactly once even when schedd or the agent dies between sending and acknowledging.
//
// Everything else (heartbeats, prepare results) only makes sense on the current stream and is
// dropped while offline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "mlsched/v1/agent.pb.h"

namespace mlsched::agent {

/// Largest report file loaded from the outbox directory (bytes); a report is well under 1 KiB.
inline constexpr size_t kMaxReportFileBytes = 64 * 1024;
/// Most unacknowledged reports kept on disk; beyond it new reports are kept in memory only (and
/// logged), so a schedd that never acknowledges cannot fill the node's disk.
inline constexpr size_t kMaxUnackedReports = 100000;

class Outbox {
 public:
  using Clock = std::chrono::steady_clock;

  /// `dir`: where unacknowledged reports are kept (created 0700 by Load()); "" keeps them in
  /// memory only (tests).
  explicit Outbox(std::string dir = "");

  /// True for reliable reports (task_started, task_exited, eviction).
  static bool IsReliable(const v1::AgentMessage& msg);

  /// Creates the directory if needed and loads the reports a previous agent left unacknowledged
  /// ("<seq>.report" files); later reports are numbered after the highest. A file that is not a
  /// regular file of at most kMaxReportFileBytes holding a reliable report is logged and removed.
  /// Returns how many were loaded; throws std::runtime_error naming the directory when it cannot
  /// be created or read.
  size_t Load();
  /// Online: transient messages are accepted. Going online clears a previous Interrupt() and
  /// queues every unacknowledged report (oldest first) ahead of anything else. Going offline
  /// drops queued transient messages.
  void SetOnline(bool online);
  /// Queues `msg` at the back. A reliable report gets the next seq and is on disk before this
  /// returns (also while offline); a transient message is dropped while offline.
  void Push(v1::AgentMessage msg);
  /// Waits until a message is queued, `until` passes, or Interrupt(); nullopt when none.
  std::optional<v1::AgentMessage> Pop(Clock::time_point until);
  /// Makes Pop return nullopt at once until the next SetOnline(true).
  void Interrupt();
  /// Makes the current (or next) Pop return at once, once (the writer then re-checks its state).
  void Wake();
  /// schedd made every report with seq <= `seq` durable: forgets them (and removes their files).
  void Ack(uint64_t seq);
  /// Messages queued to send.
  size_t Size() const;
  /// Reliable reports queued but not yet popped (the heartbeat's unsent_reports).
  size_t Unsent() const;
  /// Reliable reports not yet acknowledged.
  size_t Unacked() const;
  /// Waits until nothing is queued and every report is acknowledged; false on timeout.
  bool WaitSettled(std::chrono::milliseconds timeout);

 private:
  /// Writes the report file of `msg` (which has its seq); logs and returns false on failure.
  bool WriteFile(const v1::AgentMessage& msg);
  void RemoveFile(uint64_t seq);

  const std::string dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::AgentMessage> queue_;
  std::map<uint64_t, v1::AgentMessage> unacked_;  // by seq
  uint64_t next_seq_ = 1;
  bool online_ = false;
  bool interrupted_ = false;
  bool woken_ = false;
};

}  // namespace mlsched::agent
