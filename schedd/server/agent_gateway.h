// The agents' side of schedd: one bidirectional gRPC stream per node, served with gRPC's callback
// API (a reactor per stream, no thread per node) and a small pool of workers that hand each
// node's messages to the Controller in order (issue 30: the synchronous server held two threads
// per agent, ~2,000 at 1,000 nodes, and spent most of its time waking them).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mlsched/v1/agent.grpc.pb.h"
#include "schedd/server/auth.h"
#include "schedd/server/controller.h"
#include "schedd/server/usage_book.h"

namespace mlsched::server {

class LeaderGate;

/// Serves AgentService.Connect and implements AgentSink. Per stream: the first message must be a
/// registration (checked, authenticated, admitted by the Controller), then every message is
/// applied in arrival order (Controller::ApplyAgentMessage, by one worker at a time per stream)
/// and completed in the same order by the completer thread, which acknowledges a reliable report
/// (seq != 0) once its effect is durable. A node's next message is applied without waiting for
/// the store, so its reports are not held one fsync each (issue 30). Limits: at most
/// kMaxQueuedReads messages read and not yet applied, and as many applied and not yet completed,
/// per stream (reading pauses beyond, so HTTP/2 flow control pushes back on the agent); messages
/// to a node are queued without bound, as the Controller's own state bounds them (one prepare or
/// commit per running task, an ack per report).
class AgentGateway final : public v1::AgentService::CallbackService, public AgentSink {
 public:
  /// Messages read from one stream and not yet handled before reading pauses.
  static constexpr size_t kMaxQueuedReads = 64;
  /// Worker threads that apply agent messages and registrations; the Controller serializes them
  /// on its lock, and only registrations wait for the store on a worker.
  static constexpr int kDefaultWorkers = 4;

  /// `gate`: HA mode's LeaderGate (nullptr: always serve). Starts `workers` threads.
  explicit AgentGateway(const Authenticator& a, const LeaderGate* gate = nullptr, int workers = kDefaultWorkers);
  /// Stop()s.
  ~AgentGateway() override;
  AgentGateway(const AgentGateway&) = delete;
  AgentGateway& operator=(const AgentGateway&) = delete;

  void SetController(Controller* c) { ctl_ = c; }
  /// Where applied heartbeats are also recorded (the tasks' CPU use; optional, not owned; before
  /// serving).
  void SetUsageBook(UsageBook* u) { usage_ = u; }
  /// The epoch every message to agents carries from now on (HA: the leader's; 0 in single mode).
  void SetEpoch(int64_t epoch) { epoch_ = epoch; }
  /// Finishes the work queued, then joins the workers. Call after the gRPC server shut down and
  /// before the Controller is destroyed. Idempotent.
  void Stop();
  /// Ends every registered agent's stream now with `status`, and every stream that begins from now
  /// on (schedd's shutdown, before the gRPC server's: otherwise the server waits out its whole
  /// grace period for these calls, which never end by themselves, and for the new calls of agents
  /// reconnecting at once on their open connections). Returns how many were ended.
  size_t CloseStreams(const grpc::Status& status);

  grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>* Connect(grpc::CallbackServerContext* ctx) override;
  bool Send(const std::string& node, v1::SchedulerMessage msg) override;
  int64_t LastHeard(const std::string& node, int64_t now) override;

 private:
  class Stream;
  friend class Stream;
  /// Runs `work` on a worker thread.
  void Post(std::function<void()> work);
  void WorkerLoop();
  /// Handles a stream's first message (worker thread): checks, authenticates and admits the
  /// registration, replaces the node's previous stream, registers it with the Controller.
  void Register(const std::shared_ptr<Stream>& s, const v1::AgentMessage& first);
  /// Applies one later message of a registered stream (worker thread) and queues its completion
  /// (the acknowledgement after its writes are durable) for the completer; false: close the stream.
  bool Handle(const std::shared_ptr<Stream>& s, const v1::AgentMessage& msg);
  /// The completer thread: completes applied messages in the order they were applied
  /// (Controller::CompleteBatch), then acknowledges reliable reports.
  void CompleterLoop();
  /// The stream ended: forgets it and tells the Controller, when it was the node's current one.
  void Forget(Stream& s);

  Controller* ctl_ = nullptr;
  UsageBook* usage_ = nullptr;
  const Authenticator& auth_;
  const LeaderGate* gate_;
  std::atomic<bool> closed_{false};  // CloseStreams(): new calls are ended at once
  grpc::Status closed_status_;       // with this; written under mu_ before closed_
  std::atomic<int64_t> epoch_{0};
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Stream>> sessions_;  // guarded by mu_: the current stream per node

  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::deque<std::function<void()>> work_;  // guarded by work_mu_
  bool stopping_ = false;                   // guarded by work_mu_
  std::vector<std::thread> workers_;

  struct Completion {
    std::shared_ptr<Stream> stream;
    uint64_t seq = 0;  // the report to acknowledge (0: a heartbeat, none)
    std::unique_ptr<WriteBatch> batch;
  };
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::deque<Completion> completions_;  // guarded by done_mu_, in the order applied
  bool completer_stopping_ = false;     // guarded by done_mu_
  std::thread completer_;
};

}  // namespace mlsched::server
