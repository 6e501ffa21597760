#include "schedd/server/services.h"
#include "schedd/server/admission.h"
#include "common/session_checks.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>

namespace mlsched::server {

int64_t WallNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// INVALID_ARGUMENT when a request lists more job ids and references than [limits] allows.
grpc::Status CheckIdCount(Controller& ctl, int count) {
  const int32_t limit = ctl.Limits().max_ids_per_request;
  if (count <= limit) return grpc::Status::OK;
  return {grpc::StatusCode::INVALID_ARGUMENT, "request lists " + std::to_string(count) + " job ids; the limit is " +
                                                  std::to_string(limit) + " (policy [limits] max_ids_per_request)"};
}

grpc::Status ToGrpc(const Status& s) {
  switch (s.code) {
    case Status::kOk: return grpc::Status::OK;
    case Status::kInvalidArgument: return {grpc::StatusCode::INVALID_ARGUMENT, s.message};
    case Status::kNotFound: return {grpc::StatusCode::NOT_FOUND, s.message};
    case Status::kPermissionDenied: return {grpc::StatusCode::PERMISSION_DENIED, s.message};
    case Status::kFailedPrecondition: return {grpc::StatusCode::FAILED_PRECONDITION, s.message};
    case Status::kInternal: return {grpc::StatusCode::INTERNAL, s.message};
    case Status::kResourceExhausted: return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message};
  }
  return {grpc::StatusCode::UNKNOWN, s.message};
}

// Runs a handler, turning store failures into INTERNAL instead of tearing the server down; a
// follower (closed gate) answers with the leader's address instead.
template <typename F>
grpc::Status Guard(Controller& ctl, const LeaderGate* gate, grpc::ServerContext* ctx, const char* rpc, F&& f) {
  if (gate)
    if (auto refused = gate->Refuse(ctx)) return *refused;
  try {
    return f();
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", rpc, e.what());
    ctl.CountInternalError();
    return {grpc::StatusCode::INTERNAL, std::string(rpc) + ": " + e.what()};
  }
}

}  // namespace

std::optional<grpc::Status> LeaderGate::Refuse(grpc::ServerContextBase* ctx) const {
  if (open_) return std::nullopt;
  auto [leader, epoch] = leader_();
  if (leader == self_) leader.clear();  // elected, state still loading: no better place to go
  if (!leader.empty()) ctx->AddTrailingMetadata(kLeaderHeader, leader);
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      leader.empty() ? "schedd at " + self_ + " is not the leader and no leader is known yet (election running)"
                                     : "schedd at " + self_ + " is a follower; the leader is " + leader + " (epoch " +
                                           std::to_string(epoch) + ")");
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                       v1::SubmitJobResponse* resp) {
  return Guard(ctl_, gate_, ctx, "SubmitJob", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/SubmitJob", &c); !st.ok()) return st;
    int64_t id = 0;
    Status s = ctl_.Submit(c, req->spec(), WallNow(), &id, req->submission_key());
    resp->set_job_id(id);
    return ToGrpc(s);
  });
}

grpc::Status JobServiceImpl::CancelJobs(grpc::ServerContext* ctx, const v1::CancelJobsRequest* req,
                                        v1::CancelJobsResponse* resp) {
  return Guard(ctl_, gate_, ctx, "CancelJobs", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/CancelJobs", &c); !st.ok()) return st;
    if (auto st = CheckIdCount(ctl_, req->job_ids_size() + req->job_refs_size()); !st.ok()) return st;
    *resp = ctl_.Cancel(c, *req, WallNow());
    return grpc::Status::OK;
  });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) {
  return Guard(ctl_, gate_, ctx, "ListJobs", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/ListJobs", &c); !st.ok()) return st;
    if (auto st = CheckIdCount(ctl_, req->job_ids_size() + req->job_refs_size()); !st.ok()) return st;
    return ToGrpc(ctl_.List(c, *req, WallNow(), resp));  // one bounded page of summaries
  });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req, v1::JobInfo* resp) {
  return Guard(ctl_, gate_, ctx, "GetJob", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/GetJob", &c); !st.ok()) return st;
    return ToGrpc(ctl_.Get(c, req->job_id(), resp));  // redacted unless owner/operator
  });
}

grpc::Status JobServiceImpl::Session(grpc::ServerContext* ctx,
                                     grpc::ServerReaderWriter<v1::SessionOutput, v1::SessionInput>* stream) {
  return Guard(ctl_, gate_, ctx, "Session", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/Session", &c); !st.ok()) return st;
    if (!sessions_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this schedd serves no sessions");
    return sessions_->ServeClient(ctx, stream, c);
  });
}

grpc::ServerWriteReactor<v1::WatchAllocationEvent>* JobServiceImpl::WatchAllocation(grpc::CallbackServerContext* ctx,
                                                                                    const v1::WatchAllocationRequest* req) {
  if (gate_)
    if (auto refused = gate_->Refuse(ctx)) return AllocationWatch::Refuse(*refused);
  try {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/WatchAllocation", &c); !st.ok())
      return AllocationWatch::Refuse(st);
    if (!watch_) return AllocationWatch::Refuse({grpc::StatusCode::UNIMPLEMENTED, "this schedd watches no allocations"});
    return watch_->Watch(*req, c);
  } catch (const std::exception& e) {
    spdlog::error("WatchAllocation: {}", e.what());
    ctl_.CountInternalError();
    return AllocationWatch::Refuse({grpc::StatusCode::INTERNAL, std::string("WatchAllocation: ") + e.what()});
  }
}

grpc::Status AgentSessionServiceImpl::Relay(grpc::ServerContext* ctx,
                                            grpc::ServerReaderWriter<v1::SessionInput, v1::SessionFrame>* stream) {
  if (gate_)
    if (auto refused = gate_->Refuse(ctx)) return *refused;
  try {
    return relay_.ServeAgent(ctx, stream, auth_);
  } catch (const std::exception& e) {
    spdlog::error("Relay: {}", e.what());
    return {grpc::StatusCode::INTERNAL, std::string("Relay: ") + e.what()};
  }
}

grpc::Status JobServiceImpl::StartStep(grpc::ServerContext* ctx, const v1::StartStepRequest* req,
                                       v1::StartStepResponse* resp) {
  return Guard(ctl_, gate_, ctx, "StartStep", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/StartStep", &c); !st.ok()) return st;
    if (!steps_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this schedd records no steps");
    const std::string job = "job " + std::to_string(req->job_id());
    v1::JobInfo info;
    if (req->job_id() <= 0 || !ctl_.Get(c, req->job_id(), &info).ok())
      return grpc::Status(grpc::StatusCode::NOT_FOUND, job + " is unknown");
    if (!MaySeeDetails(c, info.uid(), info.user()))
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          job + " belongs to " + info.user() + ": only its owner or an operator may start a step in it");
    if (info.state() != v1::RUNNING)
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, job + " is " + v1::JobState_Name(info.state()) + ", not running");
    if (req->argv_size() == 0 || req->argv(0).empty() || req->argv(0).size() > kMaxSessionArgvBytes)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a step needs a command");
    int32_t id = 0;
    if (auto st = steps_->Start(info, c, req->ntasks(), req->argv(0), &id); !st.ok()) return st;
    resp->set_step_id(id);
    return grpc::Status::OK;
  });
}

grpc::Status JobServiceImpl::ListSteps(grpc::ServerContext* ctx, const v1::ListStepsRequest* req,
                                       v1::ListStepsResponse* resp) {
  return Guard(ctl_, gate_, ctx, "ListSteps", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/ListSteps", &c); !st.ok()) return st;
    if (!steps_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this schedd records no steps");
    if (auto st = CheckIdCount(ctl_, req->job_ids_size()); !st.ok()) return st;
    std::vector<int64_t> visible;
    for (int64_t id : req->job_ids()) {
      v1::JobInfo info;
      if (id > 0 && ctl_.Get(c, id, &info).ok() && MaySeeDetails(c, info.uid(), info.user())) visible.push_back(id);
    }
    std::sort(visible.begin(), visible.end());
    visible.erase(std::unique(visible.begin(), visible.end()), visible.end());
    std::vector<StepRow> rows;
    if (auto st = steps_->List(visible, &rows); !st.ok()) return st;
    for (const StepRow& r : rows) {
      auto* s = resp->add_steps();
      s->set_job_id(r.job_id);
      s->set_step_id(r.step_id);
      s->set_name(r.name);
      s->set_ntasks(r.ntasks);
      s->set_nodes(r.nodes);
      s->set_user(r.user);
      s->set_state(r.state);
      s->set_exit_code(r.exit_code);
      s->set_start_time(r.start_time);
      s->set_end_time(r.end_time);
      s->set_cpu_usec(r.cpu_usec);
      s->set_max_rss_bytes(r.max_rss_bytes);
    }
    return grpc::Status::OK;
  });
}

grpc::Status JobServiceImpl::HoldJob(grpc::ServerContext* ctx, const v1::HoldJobRequest* req, v1::HoldJobResponse*) {
  return Guard(ctl_, gate_, ctx, "HoldJob", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/HoldJob", &c); !st.ok()) return st;
    return ToGrpc(ctl_.Hold(c, req->job_id(), req->release(), WallNow()));
  });
}

grpc::Status JobServiceImpl::ExplainJob(grpc::ServerContext* ctx, const v1::ExplainJobRequest* req,
                                        v1::ExplainJobResponse* resp) {
  return Guard(ctl_, gate_, ctx, "ExplainJob", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.JobService/ExplainJob", &c); !st.ok()) return st;
    if (Status s = ctl_.Get(c, req->job_id(), resp->mutable_job()); !s.ok()) return ToGrpc(s);
    const int64_t now = WallNow();
    resp->set_now(now);
    const core::PolicySet policy = ctl_.Policy();
    resp->set_queue_order(policy.queue_order == core::QueueOrder::kMultifactor ? "multifactor" : "fifo");
    auto* w = resp->mutable_weights();
    w->set_age(policy.weights.age);
    w->set_fairshare(policy.weights.fairshare);
    w->set_job_size(policy.weights.job_size);
    w->set_partition(policy.weights.partition);
    w->set_qos(policy.weights.qos);
    w->set_max_age_s(policy.weights.max_age);
    w->set_favor_small(policy.weights.favor_small);
    if (resp->job().state() != v1::PENDING || resp->job().spec().hold()) return grpc::Status::OK;  // held: out of the cycle
    resp->set_start_basis(ctl_.StartBasis(req->job_id(), now));
    for (const auto& b : ctl_.ExplainPriorities(now)) {
      if (b.job != req->job_id()) continue;
      resp->set_pending(true);
      auto* f = resp->mutable_factors();
      f->set_age(b.age);
      f->set_fairshare(b.fairshare);
      f->set_job_size(b.job_size);
      f->set_partition(b.partition);
      f->set_qos(b.qos);
      f->set_nice(b.nice);
      f->set_priority(b.priority);
      break;
    }
    return grpc::Status::OK;
  });
}

grpc::Status AdminServiceImpl::ListNodes(grpc::ServerContext* ctx, const v1::ListNodesRequest*, v1::ListNodesResponse* resp) {
  return Guard(ctl_, gate_, ctx, "ListNodes", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.AdminService/ListNodes", &c); !st.ok()) return st;
    for (auto& n : ctl_.Nodes()) *resp->add_nodes() = std::move(n);
    return grpc::Status::OK;
  });
}

grpc::Status AdminServiceImpl::DrainNode(grpc::ServerContext* ctx, const v1::DrainNodeRequest* req, v1::DrainNodeResponse*) {
  return Guard(ctl_, gate_, ctx, "DrainNode", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.AdminService/DrainNode", &c); !st.ok()) return st;
    return ToGrpc(ctl_.Drain(c, req->node(), req->reason(), req->resume()));
  });
}

grpc::Status AdminServiceImpl::EvictNode(grpc::ServerContext* ctx, const v1::EvictNodeRequest* req, v1::EvictNodeResponse*) {
  return Guard(ctl_, gate_, ctx, "EvictNode", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.AdminService/EvictNode", &c); !st.ok()) return st;
    if (req->deadline_s() < 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "deadline must be >= 0 s");
    int64_t now = WallNow();
    return ToGrpc(ctl_.Evict(c, req->node(), now + req->deadline_s(), "admin", now));
  });
}

grpc::Status AdminServiceImpl::ReloadPolicy(grpc::ServerContext* ctx, const v1::ReloadPolicyRequest*,
                                            v1::ReloadPolicyResponse* resp) {
  return Guard(ctl_, gate_, ctx, "ReloadPolicy", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.AdminService/ReloadPolicy", &c); !st.ok()) return st;
    if (!c.privileged)
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "policy reload needs root or an operator (you are " + c.user + ")");
    PolicyReloadResult r;
    if (reloader_) r = reloader_();
    if (!r.configured)
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "schedd runs without --policy: there is no policy file to reload");
    resp->set_reloaded(r.reloaded);
    resp->set_path(r.path);
    for (auto& e : r.errors) resp->add_errors(std::move(e));
    spdlog::info("ReloadPolicy by {}: {}", c.user, r.reloaded ? "reloaded" : "kept the running policy");
    return grpc::Status::OK;
  });
}

grpc::Status AdminServiceImpl::HaStatus(grpc::ServerContext* ctx, const v1::HaStatusRequest*, v1::HaStatusResponse* resp) {
  return Guard(ctl_, nullptr, ctx, "HaStatus", [&] {
    Caller c;
    if (auto st = auth_.Authenticate(ctx, "mlsched.v1.AdminService/HaStatus", &c); !st.ok()) return st;
    if (ha_status_) {
      *resp = ha_status_();
    } else {
      resp->set_mode("single");
    }
    return grpc::Status::OK;
  });
}

}  // namespace mlsched::server
