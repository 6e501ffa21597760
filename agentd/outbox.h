// Outbox: messages waiting for the stream to schedd. Task exits and eviction notices are durable:
// they wait through a disconnection and go out after the next registration. Everything else
// (heartbeats, prepare results, task starts) only makes sense on the current stream and is
// dropped while offline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "mlsched/v1/agent.pb.h"

namespace mlsched::agent {

class Outbox {
 public:
  using Clock = std::chrono::steady_clock;

  /// True for messages kept while disconnected (task_exited, eviction).
  static bool IsDurable(const v1::AgentMessage& msg);

  /// Online: transient messages are accepted. Going offline drops queued transient messages.
  /// Going online clears a previous Interrupt().
  void SetOnline(bool online);
  /// Queues `msg` at the back (transient messages are dropped while offline).
  void Push(v1::AgentMessage msg);
  /// Puts a durable message back at the front after a failed write.
  void PushFront(v1::AgentMessage msg);
  /// Waits until a message is queued, `until` passes, or Interrupt(); nullopt when none.
  std::optional<v1::AgentMessage> Pop(Clock::time_point until);
  /// Makes Pop return nullopt at once until the next SetOnline(true).
  void Interrupt();
  /// Number of queued messages.
  size_t Size() const;
  /// Waits until the queue is empty; false on timeout.
  bool WaitEmpty(std::chrono::milliseconds timeout);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::AgentMessage> queue_;
  bool online_ = false;
  bool interrupted_ = false;
};

}  // namespace mlsched::agent
