#include "cli/rpc.h"

#include <grpcpp/grpcpp.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cli/exit_codes.h"
#include "common/client.h"
#include "mlsched/v1/admin.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"

namespace mlsched::cli {

struct SchedClient::Impl {
  std::string address;
  int timeout_s = 30;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::AdminService::Stub> admin;

  /// A new channel (and stubs); `retry`: with a private subchannel, so that the next attempt
  /// after a transient failure connects at once.
  void Reconnect(bool retry = false) {
    channel = MakeChannel(address, retry);
    jobs = v1::JobService::NewStub(channel);
    admin = v1::AdminService::NewStub(channel);
  }

  // Runs one unary call with fresh credentials and deadline.
  template <typename F>
  RpcStatus Call(F&& f) {
    grpc::ClientContext ctx;
    PrepareContext(ctx, address, timeout_s);
    grpc::Status st = f(&ctx);
    return RpcStatus{static_cast<int>(st.error_code()), st.error_message()};
  }
};

SchedClient::SchedClient(const std::string& server_flag, int timeout_s) : impl_(std::make_unique<Impl>()) {
  impl_->address = ResolveServerAddress(server_flag);
  impl_->timeout_s = timeout_s;
  impl_->Reconnect();
}

SchedClient::~SchedClient() = default;

const std::string& SchedClient::Address() const { return impl_->address; }

std::string NewSubmissionKey() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) {
    key += kHex[b >> 4];
    key += kHex[b & 15];
  }
  return key;
}

double RetryBudgetFromEnv() {
  for (const char* name : {"MLSCHED_RETRY", "MLSCHED_SUBMIT_RETRY"})
    if (const char* v = std::getenv(name); v && *v) return std::max(0.0, std::atof(v));
  return 15;
}

namespace {

/// Runs attempt(n) for n = 1, 2, ... until it succeeds, fails for a reason other than
/// UNAVAILABLE / DEADLINE_EXCEEDED, or the next wait would end past `retry_s`; backs off 0.25 s
/// doubling to 4 s and calls `reconnect` before each retry.
template <typename Attempt>
RpcStatus Retrying(Attempt&& attempt, double retry_s, const SchedClient::OnRetry& on_retry,
                   const std::function<void()>& reconnect) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(retry_s);
  double wait_s = 0.25;
  for (int n = 1;; ++n) {
    RpcStatus st = attempt(n);
    const bool transient = st.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE) ||
                           st.code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED);
    if (st.ok() || !transient || std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s) > give_up)
      return st;
    if (on_retry) on_retry(st, wait_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    wait_s = std::min(wait_s * 2, 4.0);
    reconnect();
  }
}

}  // namespace

RpcStatus SchedClient::SubmitJob(const v1::JobSpec& spec, int64_t* job_id, double retry_s, const OnRetry& on_retry) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_submission_key(NewSubmissionKey());
  return Retrying(
      [&](int) {
        v1::SubmitJobResponse resp;
        RpcStatus st = impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->SubmitJob(c, req, &resp); });
        *job_id = resp.job_id();
        return st;
      },
      retry_s, on_retry, [this] { impl_->Reconnect(/*retry=*/true); });
}

RpcStatus SchedClient::ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->ListJobs(c, req, resp); });
}

RpcStatus SchedClient::CancelJobs(const v1::CancelJobsRequest& req, v1::CancelJobsResponse* resp, double retry_s,
                                  const OnRetry& on_retry) {
  if (req.signal() != 0) retry_s = 0;
  return Retrying(
      [&](int n) {
        resp->Clear();
        RpcStatus st = impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->CancelJobs(c, req, resp); });
        if (!st.ok() || n == 1) return st;
        // An earlier try may have cancelled these before its answer was lost.
        std::vector<std::string> errors;
        for (const auto& e : resp->errors()) {
          long long id = 0;
          char rest[32] = {};
          if (std::sscanf(e.c_str(), "job %lld: already %31s", &id, rest) == 2 && std::string(rest) == "CANCELLED")
            resp->add_cancelled(id);
          else
            errors.push_back(e);
        }
        resp->clear_errors();
        for (auto& e : errors) resp->add_errors(std::move(e));
        return st;
      },
      retry_s, on_retry, [this] { impl_->Reconnect(/*retry=*/true); });
}

RpcStatus SchedClient::GetJob(int64_t job_id, v1::JobInfo* job) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->GetJob(c, req, job); });
}

RpcStatus SchedClient::HoldJob(int64_t job_id, bool release, double retry_s, const OnRetry& on_retry) {
  v1::HoldJobRequest req;
  req.set_job_id(job_id);
  req.set_release(release);
  return Retrying(
      [&](int) {
        v1::HoldJobResponse resp;
        return impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->HoldJob(c, req, &resp); });
      },
      retry_s, on_retry, [this] { impl_->Reconnect(/*retry=*/true); });
}

RpcStatus SchedClient::ExplainJob(int64_t job_id, v1::ExplainJobResponse* resp) {
  v1::ExplainJobRequest req;
  req.set_job_id(job_id);
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->jobs->ExplainJob(c, req, resp); });
}

RpcStatus SchedClient::ListNodes(v1::ListNodesResponse* resp) {
  v1::ListNodesRequest req;
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->admin->ListNodes(c, req, resp); });
}

RpcStatus SchedClient::DrainNode(const std::string& node, const std::string& reason, bool resume) {
  v1::DrainNodeRequest req;
  req.set_node(node);
  req.set_reason(reason);
  req.set_resume(resume);
  v1::DrainNodeResponse resp;
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->admin->DrainNode(c, req, &resp); });
}

RpcStatus SchedClient::EvictNode(const std::string& node, int64_t deadline_s) {
  v1::EvictNodeRequest req;
  req.set_node(node);
  req.set_deadline_s(deadline_s);
  v1::EvictNodeResponse resp;
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->admin->EvictNode(c, req, &resp); });
}

RpcStatus SchedClient::ReloadPolicy(v1::ReloadPolicyResponse* resp) {
  v1::ReloadPolicyRequest req;
  return impl_->Call([&](grpc::ClientContext* c) { return impl_->admin->ReloadPolicy(c, req, resp); });
}

std::string DescribeRpcError(const std::string& tool, const RpcStatus& status, const std::string& address,
                             int timeout_s) {
  if (status.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE))
    return tool + ": cannot reach schedd at " + address + ": " + status.message +
           " (is schedd running? set --server or MLSCHED_SERVER)";
  if (status.code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED))
    return tool + ": schedd at " + address + " did not answer within " + std::to_string(timeout_s) + " s";
  if (status.code == static_cast<int>(grpc::StatusCode::UNAUTHENTICATED))
    return tool + ": schedd at " + address + " refused the credentials: " + status.message;
  return tool + ": " + status.message;
}

}  // namespace mlsched::cli
