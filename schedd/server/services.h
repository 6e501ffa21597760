// gRPC service implementations: thin adapters from the wire to the Controller.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "mlsched/v1/admin.grpc.pb.h"
#include "mlsched/v1/agent.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "schedd/server/auth.h"
#include "schedd/server/controller.h"
#include "schedd/server/allocation_watch.h"
#include "schedd/server/session_relay.h"

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

/// HA mode: whether this replica serves requests now. While closed (a follower, or a leader
/// still loading its state or stepping down) every call is answered UNAVAILABLE with the
/// leader's address in the message and in the trailing metadata kLeaderHeader, so clients and
/// agents move to the leader. Thread-safe.
class LeaderGate {
 public:
  /// `self`: this replica's client address; `leader()`: the leader's address and epoch now.
  LeaderGate(std::string self, std::function<std::pair<std::string, int64_t>()> leader)
      : self_(std::move(self)), leader_(std::move(leader)) {}
  void Open() { open_ = true; }
  void Close() { open_ = false; }
  bool IsOpen() const { return open_; }
  /// nullopt while open; else the answer (the leader hint set on `ctx`).
  std::optional<grpc::Status> Refuse(grpc::ServerContextBase* ctx) const;

 private:
  std::string self_;
  std::function<std::pair<std::string, int64_t>()> leader_;
  std::atomic<bool> open_{false};
};

/// Metadata key of the leader's client address in a follower's answer.
inline constexpr const char* kLeaderHeader = "x-mlsched-leader";

/// The answer to AdminService.HaStatus (installed by the daemon's main; single mode without one).
using HaStatusProvider = std::function<v1::HaStatusResponse()>;

class JobServiceImpl final
    : public mlsched::v1::JobService::WithCallbackMethod_WatchAllocation<mlsched::v1::JobService::Service> {
 public:
  /// `gate`: HA mode's LeaderGate (nullptr: always serve).
  JobServiceImpl(Controller& c, const Authenticator& a, const LeaderGate* gate = nullptr)
      : ctl_(c), auth_(a), gate_(gate) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::SubmitJobResponse*) override;
  grpc::Status CancelJobs(grpc::ServerContext*, const v1::CancelJobsRequest*, v1::CancelJobsResponse*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::JobInfo*) override;
  grpc::Status HoldJob(grpc::ServerContext*, const v1::HoldJobRequest*, v1::HoldJobResponse*) override;
  /// Priority factors computed now (Controller::ExplainPriorities), weights, reason and expected start.
  grpc::Status ExplainJob(grpc::ServerContext*, const v1::ExplainJobRequest*, v1::ExplainJobResponse*) override;
  /// An interactive session (SessionRelay::ServeClient); UNIMPLEMENTED without a relay.
  grpc::Status Session(grpc::ServerContext*, grpc::ServerReaderWriter<v1::SessionOutput, v1::SessionInput>*) override;
  /// Where sessions go (set before the server starts).
  void SetSessionRelay(SessionRelay* relay) { sessions_ = relay; }
  /// An allocation bound to its client (AllocationWatch::Watch; a callback reactor, no thread).
  grpc::ServerWriteReactor<v1::WatchAllocationEvent>* WatchAllocation(grpc::CallbackServerContext* ctx,
                                                                     const v1::WatchAllocationRequest* req) override;
  /// Where watches go (set before the server starts).
  void SetAllocationWatch(AllocationWatch* watch) { watch_ = watch; }
  /// A step in a running job (StepBook::Start) by its owner or a privileged user; UNIMPLEMENTED
  /// without a step book.
  grpc::Status StartStep(grpc::ServerContext*, const v1::StartStepRequest*, v1::StartStepResponse*) override;
  /// The steps of the listed jobs the caller may see the details of (others are left out).
  grpc::Status ListSteps(grpc::ServerContext*, const v1::ListStepsRequest*, v1::ListStepsResponse*) override;
  /// Where steps are recorded (set before the server starts).
  void SetStepBook(StepBook* steps) { steps_ = steps; }

 private:
  Controller& ctl_;
  const Authenticator& auth_;
  const LeaderGate* gate_;
  SessionRelay* sessions_ = nullptr;
  AllocationWatch* watch_ = nullptr;
  StepBook* steps_ = nullptr;
};

/// The agents' relay streams of interactive sessions (SessionRelay::ServeAgent).
class AgentSessionServiceImpl final : public mlsched::v1::AgentSessionService::Service {
 public:
  AgentSessionServiceImpl(SessionRelay& relay, const Authenticator& a, const LeaderGate* gate = nullptr)
      : relay_(relay), auth_(a), gate_(gate) {}
  grpc::Status Relay(grpc::ServerContext*, grpc::ServerReaderWriter<v1::SessionInput, v1::SessionFrame>*) override;

 private:
  SessionRelay& relay_;
  const Authenticator& auth_;
  const LeaderGate* gate_;
};

class AdminServiceImpl final : public mlsched::v1::AdminService::Service {
 public:
  AdminServiceImpl(Controller& c, const Authenticator& a, const LeaderGate* gate = nullptr)
      : ctl_(c), auth_(a), gate_(gate) {}
  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse*) override;
  grpc::Status DrainNode(grpc::ServerContext*, const v1::DrainNodeRequest*, v1::DrainNodeResponse*) override;
  grpc::Status EvictNode(grpc::ServerContext*, const v1::EvictNodeRequest*, v1::EvictNodeResponse*) override;
  /// Privileged callers only; FAILED_PRECONDITION without a reloader (no --policy file).
  grpc::Status ReloadPolicy(grpc::ServerContext*, const v1::ReloadPolicyRequest*, v1::ReloadPolicyResponse*) override;
  /// Answered by every replica, followers included (any authenticated caller).
  grpc::Status HaStatus(grpc::ServerContext*, const v1::HaStatusRequest*, v1::HaStatusResponse*) override;
  /// Set before the server starts.
  void SetPolicyReloader(PolicyReloader r) { reloader_ = std::move(r); }
  void SetHaStatusProvider(HaStatusProvider p) { ha_status_ = std::move(p); }

 private:
  Controller& ctl_;
  const Authenticator& auth_;
  const LeaderGate* gate_;
  PolicyReloader reloader_;
  HaStatusProvider ha_status_;
};

}  // namespace mlsched::server
