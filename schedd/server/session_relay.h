// SessionRelay: schedd's side of interactive sessions (proto/mlsched/v1/session.proto), a
// component beside the Controller, which it only asks for a job's owner, state and placement.
// A client's JobService.Session stream is checked (the open, the caller may act on the job, the
// job runs, the rank exists, the per-user and total limits), the rank's agent is told to open a
// session (SchedulerMessage.open_session with a fresh id and a 256-bit token) and answers on its
// own AgentSessionService.Relay stream, authenticated by its node certificate for that node and
// the token. The two streams are then joined: one thread per direction, each blocking on its
// peer's flow control, so a terminal that reads slowly slows the remote process (the agent stops
// reading its pty) and no buffer grows here beyond one message per direction.
// Ends: the process's exit reaches the client last; a client that goes away gets its process
// hung up (SIGHUP, then the agent's SIGKILL); an agent stream that ends first gives the client an
// error. A session lasts as long as the streams: a schedd restart or an agent reconnect ends it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "mlsched/v1/agent.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "schedd/server/auth.h"
#include "schedd/server/controller.h"
#include "schedd/server/step_book.h"

namespace mlsched::server {

class SessionRelay {
 public:
  struct Limits {
    size_t max_per_user = 8;    // sessions one uid holds at once
    size_t max_total = 256;     // sessions in all (each holds two server threads)
    std::chrono::milliseconds attach_timeout{15000};  // for the agent's relay stream
    std::chrono::milliseconds hangup_grace{10000};    // after a client left, for the process's exit
    /// Bytes per second all sessions together may relay (both directions; 0 = no limit), so bulk
    /// output cannot take schedd's CPU from scheduling (schedd --session-bytes-per-second).
    int64_t bytes_per_second = 64 << 20;
  };
  using ClientStream = grpc::ServerReaderWriter<v1::SessionOutput, v1::SessionInput>;
  using AgentStream = grpc::ServerReaderWriter<v1::SessionInput, v1::SessionFrame>;

  SessionRelay(Controller& ctl, AgentSink& agents, Limits limits) : ctl_(ctl), agents_(agents), limits_(limits) {}
  SessionRelay(Controller& ctl, AgentSink& agents) : SessionRelay(ctl, agents, Limits{}) {}

  /// Serves one client's session to its end (the gRPC handler's thread). Errors before the
  /// process starts: INVALID_ARGUMENT (the open), NOT_FOUND (the job), PERMISSION_DENIED (another
  /// user's job), FAILED_PRECONDITION (not running, no --overlap), RESOURCE_EXHAUSTED (limits),
  /// UNAVAILABLE (the node is not connected or did not answer in attach_timeout).
  grpc::Status ServeClient(grpc::ServerContext* ctx, ClientStream* stream, const Caller& caller);
  /// Serves one agent's relay stream: its first frame names a session waiting for that node,
  /// whose node certificate (or privileged Unix peer) `auth` accepts for the session's node.
  grpc::Status ServeAgent(grpc::ServerContext* ctx, AgentStream* stream, const Authenticator& auth);
  /// Sessions open now.
  size_t Open();
  /// Where relayed bytes are counted (mlsched_session_bytes_total); set before serving.
  void SetMetrics(SchedMetrics* m) { metrics_ = m; }
  /// Where each session is recorded as a step's task (set before serving; null: not recorded).
  void SetStepBook(StepBook* steps) { steps_ = steps; }
  /// When a session of `job_id` last relayed input or output (its open sessions' and those ended
  /// in the last day); nullopt when none did.
  std::optional<std::chrono::steady_clock::time_point> LastActivity(int64_t job_id);

 private:
  struct Session;
  grpc::Status Start(const v1::SessionOpen& open, const Caller& caller, std::shared_ptr<Session>* out);
  void Forget(const std::shared_ptr<Session>& s);
  /// Reports the session's end to the step book (its process's exit, or why it has none).
  void EndStepTask(Session& s, const std::string& why_no_exit);

  /// Waits until `bytes` fit in the shared budget (a token bucket of limits_.bytes_per_second
  /// with a tenth of a second of burst).
  void Throttle(size_t bytes);

  Controller& ctl_;
  AgentSink& agents_;
  Limits limits_;
  SchedMetrics* metrics_ = nullptr;
  StepBook* steps_ = nullptr;
  std::map<int64_t, std::chrono::steady_clock::time_point> ended_io_;  // job -> last I/O of its ended sessions
  std::mutex bucket_mu_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point refilled_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;  // by id
  std::map<uint32_t, size_t> per_user_;
};

}  // namespace mlsched::server
