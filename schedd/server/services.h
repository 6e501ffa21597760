// gRPC service implementations: thin adapters from the wire to the Controller.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mlsched/v1/admin.grpc.pb.h"
#include "mlsched/v1/agent.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "schedd/server/auth.h"
#include "schedd/server/controller.h"

namespace mlsched::server {

/// Seconds since the Unix epoch (the daemon's clock; the Controller itself never reads a clock).
int64_t WallNow();

/// Outcome of re-reading the policy file (SIGHUP and AdminService.ReloadPolicy share it).
struct PolicyReloadResult {
  bool configured = false;          // schedd runs with --policy
  bool reloaded = false;            // the new policy is in force
  std::string path;                 // the --policy file
  std::vector<std::string> errors;  // "FILE:LINE:COL: message" when not reloaded
};
/// Re-reads the policy file and installs it all or nothing (installed by the daemon's main).
using PolicyReloader = std::function<PolicyReloadResult()>;

class JobServiceImpl final : public mlsched::v1::JobService::Service {
 public:
  JobServiceImpl(Controller& c, const Authenticator& a) : ctl_(c), auth_(a) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status CancelJobs(grpc::ServerContext*, const v1::CancelJobsRequest*, v1::CancelJobsResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::JobInfo*) override;
  grpc::Status HoldJob(grpc::ServerContext*, const v1::HoldJobRequest*, v1::HoldJobResponse*) override;
  /// Priority factors computed now (Controller::ExplainPriorities), weights, reason and expected start.
  grpc::Status ExplainJob(grpc::ServerContext*, const v1::ExplainJobRequest*, v1::ExplainJobResponse*) override;

 private:
  Controller& ctl_;
  const Authenticator& auth_;
};

class AdminServiceImpl final : public mlsched::v1::AdminService::Service {
 public:
  AdminServiceImpl(Controller& c, const Authenticator& a) : ctl_(c), auth_(a) {}
  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse*) override;
  grpc::Status DrainNode(grpc::ServerContext*, const v1::DrainNodeRequest*, v1::DrainNodeResponse*) override;
  grpc::Status EvictNode(grpc::ServerContext*, const v1::EvictNodeRequest*, v1::EvictNodeResponse*) override;
  /// Privileged callers only; FAILED_PRECONDITION without a reloader (no --policy file).
  grpc::Status ReloadPolicy(grpc::ServerContext*, const v1::ReloadPolicyRequest*, v1::ReloadPolicyResponse*) override;
  /// Set before the server starts.
  void SetPolicyReloader(PolicyReloader r) { reloader_ = std::move(r); }

 private:
  Controller& ctl_;
  const Authenticator& auth_;
  PolicyReloader reloader_;
};

/// The agents' side: one bidirectional stream per agent, each with an outbox drained by a writer
/// thread so the Controller never blocks on a slow agent. Implements AgentSink.
class AgentGateway final : public mlsched::v1::AgentService::Service, public AgentSink {
 public:
  explicit AgentGateway(const Authenticator& a) : auth_(a) {}
  void SetController(Controller* c) { ctl_ = c; }
  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::SchedulerMessage, v1::AgentMessage>* stream) override;
  bool Send(const std::string& node, const v1::SchedulerMessage& msg) override;

 private:
  struct Session {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<v1::SchedulerMessage> outbox;
    bool closed = false;
    grpc::ServerContext* ctx = nullptr;  // cancelled when a newer session for the node replaces this one
  };
  /// Registers `node`, then relays its messages to the controller until the stream ends; a writer
  /// thread drains the session's outbox meanwhile. Exceptions (a failing store) propagate after
  /// the writer is joined.
  void Serve(const std::string& node, const v1::RegisterNode& reg, Session& session,
             grpc::ServerReaderWriter<v1::SchedulerMessage, v1::AgentMessage>* stream);
  Controller* ctl_ = nullptr;
  const Authenticator& auth_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

}  // namespace mlsched::server
