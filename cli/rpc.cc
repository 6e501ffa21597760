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
#include <string>
#include <thread>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/failover.h"
#include "common/client.h"
#include "common/safe_text.h"
#include "mlsched/v1/admin.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"

namespace mlsched::cli {

namespace {

/// UNAVAILABLE before anything was sent: gRPC found no connection ("failed to connect to all
/// addresses ..."). Anything else (a reset, a lost answer) may have reached schedd.
bool NeverSent(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message().rfind("failed to connect", 0) == 0;
}

/// How long a call to one of several replicas waits for its connection (TCP, TLS handshake) before
/// the next replica is tried, seconds. A stopped or wedged replica (SIGSTOP, a hung host) accepts
/// TCP in the kernel but never completes the handshake; without this bound every call would wait
/// for its whole deadline there. Loopback and LAN handshakes take milliseconds.
constexpr int kReplicaConnectTimeoutS = 3;

/// Waits up to kReplicaConnectTimeoutS for `channel` to connect. False only when it is still
/// connecting at the end (no answer to the handshake); a refused connection (TRANSIENT_FAILURE)
/// returns true at once so that the call itself fails fast with gRPC's own message.
bool ConnectsInTime(grpc::Channel& channel) {
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(kReplicaConnectTimeoutS);
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY && state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_SHUTDOWN) {
    if (!channel.WaitForStateChange(state, deadline)) return false;
    state = channel.GetState(true);
  }
  return true;
}

}  // namespace

struct SchedClient::Impl {
  /// One replica's channel and stubs, made on first use.
  struct Member {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::JobService::Stub> jobs;
    std::unique_ptr<v1::AdminService::Stub> admin;
  };
  std::vector<std::string> servers;
  std::string config_error;
  size_t current = 0;  // the replica the next call goes to (the last one that answered)
  int timeout_s = 30;
  bool private_subchannel = false;  // after a transient failure: connect at once
  bool ambiguous = false;           // the current operation had a failure that may have been acted on
  std::vector<Member> members;

  /// `i`'s channel and stubs, made now if needed (MakeChannel may throw).
  Member& At(size_t i) {
    Member& m = members[i];
    if (!m.channel) {
      m.channel = MakeChannel(servers[i], private_subchannel);
      m.jobs = v1::JobService::NewStub(m.channel);
      m.admin = v1::AdminService::NewStub(m.channel);
    }
    return m;
  }

  /// New channels from the next call on; `retry`: with private subchannels, so that the next
  /// attempt after a transient failure connects at once.
  void Reconnect(bool retry = false) {
    private_subchannel = retry;
    for (auto& m : members) m = Member{};
  }

  /// Runs one unary call `f(ctx, member)` with fresh credentials and deadline, following the
  /// leader over the replicas (CallWithFailover). `only_safe_hops`: for signals.
  template <typename F>
  RpcStatus Call(F&& f, bool only_safe_hops = false) {
    if (!config_error.empty()) return RpcStatus{static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT), config_error, {}};
    FailoverResult r = CallWithFailover(
        servers, &current,
        [&](size_t i) {
          HopResult hop;
          try {
            Member& m = At(i);
            if (servers.size() > 1 && !ConnectsInTime(*m.channel)) {  // nothing sent: hop on
              hop.status = RpcStatus{static_cast<int>(grpc::StatusCode::UNAVAILABLE),
                                     "no answer to the connection within " + std::to_string(kReplicaConnectTimeoutS) +
                                         " s (replica stopped or overloaded)",
                                     {}};
              hop.unsent = true;
              return hop;
            }
            grpc::ClientContext ctx;
            PrepareContext(ctx, servers[i], timeout_s);
            grpc::Status st = f(&ctx, m);
            hop.status = RpcStatus{static_cast<int>(st.error_code()), st.error_message(), {}};
            LeaderHint hint = LeaderHintOf(ctx);
            hop.follower = hint.present && st.error_code() == grpc::StatusCode::UNAVAILABLE;
            hop.leader_hint = hint.leader;
            hop.unsent = NeverSent(st);
          } catch (const std::exception& e) {  // the channel could not be made: the CA file is unreadable
            hop.status = RpcStatus{static_cast<int>(grpc::StatusCode::UNAVAILABLE), e.what(), {}};
            hop.unsent = true;
          }
          return hop;
        },
        only_safe_hops);
    ambiguous = ambiguous || r.ambiguous;
    if (r.status.code == kCodeUnavailable || r.status.code == kCodeDeadlineExceeded) r.status.tried = r.tried;
    return r.status;
  }
};

SchedClient::SchedClient(const std::string& server_flag, int timeout_s) : impl_(std::make_unique<Impl>()) {
  ServerList list;
  impl_->config_error = ResolveServerList(server_flag, &list);
  if (!impl_->config_error.empty()) list.addresses = {ResolveServerAddress(server_flag)};
  impl_->servers = std::move(list.addresses);
  impl_->members.resize(impl_->servers.size());
  impl_->timeout_s = timeout_s;
}

SchedClient::SchedClient(ServerList servers, int timeout_s) : impl_(std::make_unique<Impl>()) {
  impl_->servers = std::move(servers.addresses);
  if (impl_->servers.empty()) impl_->config_error = "no schedd address given";
  impl_->members.resize(impl_->servers.size());
  impl_->timeout_s = timeout_s;
}

SchedClient::~SchedClient() = default;

const std::string& SchedClient::Address() const {
  static const std::string kNone;
  return impl_->servers.empty() ? kNone : impl_->servers[impl_->current];
}

const std::string& SchedClient::ConfigError() const { return impl_->config_error; }

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

RpcStatus SchedClient::SubmitJob(const v1::JobSpec& spec, int64_t* job_id, double retry_s, const OnRetry& on_retry,
                                 const std::string& submission_key) {
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_submission_key(submission_key.empty() ? NewSubmissionKey() : submission_key);
  return Retrying(
      [&](int) {
        v1::SubmitJobResponse resp;
        RpcStatus st = impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->SubmitJob(c, req, &resp); });
        *job_id = resp.job_id();
        return st;
      },
      retry_s, on_retry, [this] { impl_->Reconnect(/*retry=*/true); });
}

RpcStatus SchedClient::ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp) {
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->ListJobs(c, req, resp); });
}

RpcStatus SchedClient::CancelJobs(const v1::CancelJobsRequest& req, v1::CancelJobsResponse* resp, double retry_s,
                                  const OnRetry& on_retry) {
  const bool signal = req.signal() != 0;
  if (signal) retry_s = 0;
  impl_->ambiguous = false;
  return Retrying(
      [&](int) {
        resp->Clear();
        RpcStatus st = impl_->Call(
            [&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->CancelJobs(c, req, resp); }, signal);
        if (!st.ok() || !impl_->ambiguous) return st;
        // An earlier call may have cancelled these before its answer was lost.
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

namespace {

class GrpcSessionStream final : public SessionStream {
 public:
  explicit GrpcSessionStream(v1::JobService::Stub& stub) : stream_(stub.Session(&ctx_)) {}
  bool Write(const v1::SessionInput& in) override { return stream_->Write(in); }
  bool Read(v1::SessionOutput* out) override { return stream_->Read(out); }
  void WritesDone() override { stream_->WritesDone(); }
  RpcStatus Finish() override {
    grpc::Status st = stream_->Finish();
    return RpcStatus{static_cast<int>(st.error_code()), st.error_message(), {}};
  }
  void Cancel() override { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionInput, v1::SessionOutput>> stream_;
};

}  // namespace

std::unique_ptr<SessionStream> SchedClient::OpenSession(std::string* error) {
  if (!impl_->config_error.empty()) {
    *error = impl_->config_error;
    return nullptr;
  }
  try {
    return std::make_unique<GrpcSessionStream>(*impl_->At(impl_->current).jobs);
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}

namespace {

// One WatchAllocation call on the channels of `impl` (its replica `current`).
struct AllocationWatchCall {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReader<v1::WatchAllocationEvent>> reader;
};

// Whether a watch that ended with `code` is worth opening again: the stream broke (schedd
// restarted, a failover, the network) rather than schedd refusing it for good (the job ended,
// another user's, a limit).
bool WatchAgain(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED || code == grpc::StatusCode::UNKNOWN ||
         code == grpc::StatusCode::INTERNAL || code == grpc::StatusCode::DEADLINE_EXCEEDED || code == grpc::StatusCode::OK;
}

}  // namespace

std::string SchedClient::WatchAllocation(int64_t job_id, std::function<void(const v1::WatchAllocationEvent&)> on_event) {
  if (!impl_->config_error.empty()) return impl_->config_error;
  // Channels of its own: the watch's thread calls while this client makes other calls.
  auto own = std::make_shared<Impl>();
  own->servers = impl_->servers;
  own->members.resize(own->servers.size());
  own->current = impl_->current;
  own->timeout_s = impl_->timeout_s;
  // Opens the watch and reads its first event (the watch is in force); the status otherwise.
  auto open = [own, job_id](std::shared_ptr<AllocationWatchCall>* out) -> grpc::Status {
    auto w = std::make_shared<AllocationWatchCall>();
    v1::WatchAllocationRequest req;
    req.set_job_id(job_id);
    try {
      w->reader = own->At(own->current).jobs->WatchAllocation(&w->ctx, req);
    } catch (const std::exception& e) {
      return {grpc::StatusCode::UNAVAILABLE, e.what()};
    }
    v1::WatchAllocationEvent ev;
    if (!w->reader->Read(&ev)) {
      grpc::Status st = w->reader->Finish();
      return st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the watch ended at once") : st;
    }
    *out = std::move(w);
    return grpc::Status::OK;
  };
  std::shared_ptr<AllocationWatchCall> first;
  if (grpc::Status st = open(&first); !st.ok()) return st.error_message();
  // Until the process exits: events to `on_event`; a broken watch is opened again (after a schedd
  // restart or failover schedd gives an unwatched allocation its grace for this), on the next
  // replica when the one it had does not take it, every second.
  std::thread([own, open, first, on_event = std::move(on_event)] {
    std::shared_ptr<AllocationWatchCall> w = first;
    for (;;) {
      v1::WatchAllocationEvent more;
      while (w->reader->Read(&more))
        if (on_event) on_event(more);
      if (!WatchAgain(w->reader->Finish().error_code())) return;
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        grpc::Status st = open(&w);
        if (st.ok()) break;
        if (!WatchAgain(st.error_code())) return;
        own->Reconnect();
        if (!own->servers.empty()) own->current = (own->current + 1) % own->servers.size();
      }
    }
  }).detach();
  return "";
}

RpcStatus SchedClient::StartStep(int64_t job_id, int32_t ntasks, const std::vector<std::string>& argv, int32_t* step_id) {
  v1::StartStepRequest req;
  req.set_job_id(job_id);
  req.set_ntasks(ntasks);
  for (const auto& a : argv) req.add_argv(a);
  v1::StartStepResponse resp;
  RpcStatus st = impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->StartStep(c, req, &resp); });
  *step_id = resp.step_id();
  return st;
}

RpcStatus SchedClient::ListSteps(const std::vector<int64_t>& job_ids, v1::ListStepsResponse* resp) {
  v1::ListStepsRequest req;
  for (int64_t id : job_ids) req.add_job_ids(id);
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->ListSteps(c, req, resp); });
}

RpcStatus SchedClient::GetJob(int64_t job_id, v1::JobInfo* job) {
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->GetJob(c, req, job); });
}

RpcStatus SchedClient::HoldJob(int64_t job_id, bool release, double retry_s, const OnRetry& on_retry) {
  v1::HoldJobRequest req;
  req.set_job_id(job_id);
  req.set_release(release);
  return Retrying(
      [&](int) {
        v1::HoldJobResponse resp;
        return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->HoldJob(c, req, &resp); });
      },
      retry_s, on_retry, [this] { impl_->Reconnect(/*retry=*/true); });
}

RpcStatus SchedClient::ExplainJob(int64_t job_id, v1::ExplainJobResponse* resp) {
  v1::ExplainJobRequest req;
  req.set_job_id(job_id);
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.jobs->ExplainJob(c, req, resp); });
}

RpcStatus SchedClient::ListNodes(v1::ListNodesResponse* resp) {
  v1::ListNodesRequest req;
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.admin->ListNodes(c, req, resp); });
}

RpcStatus SchedClient::DrainNode(const std::string& node, const std::string& reason, bool resume) {
  v1::DrainNodeRequest req;
  req.set_node(node);
  req.set_reason(reason);
  req.set_resume(resume);
  v1::DrainNodeResponse resp;
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.admin->DrainNode(c, req, &resp); });
}

RpcStatus SchedClient::EvictNode(const std::string& node, int64_t deadline_s) {
  v1::EvictNodeRequest req;
  req.set_node(node);
  req.set_deadline_s(deadline_s);
  v1::EvictNodeResponse resp;
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.admin->EvictNode(c, req, &resp); });
}

RpcStatus SchedClient::ReloadPolicy(v1::ReloadPolicyResponse* resp) {
  v1::ReloadPolicyRequest req;
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.admin->ReloadPolicy(c, req, resp); });
}

RpcStatus SchedClient::HaStatus(v1::HaStatusResponse* resp) {
  v1::HaStatusRequest req;
  return impl_->Call([&](grpc::ClientContext* c, Impl::Member& m) { return m.admin->HaStatus(c, req, resp); });
}

namespace {

std::string DescribeRaw(const std::string& tool, const RpcStatus& status, const std::string& address, int timeout_s) {
  if (status.tried.size() > 1 && (status.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE) ||
                                  status.code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED))) {
    std::string all;
    for (const auto& a : status.tried) all += (all.empty() ? "" : ", ") + a;
    return tool + ": no schedd leader answered at " + all + ": " + status.message +
           " (are the replicas running and has one been elected? set --server or MLSCHED_SERVER)";
  }
  if (status.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE))
    return tool + ": cannot reach schedd at " + address + ": " + status.message +
           " (is schedd running? set --server or MLSCHED_SERVER)";
  if (status.code == static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED))
    return tool + ": schedd at " + address + " did not answer within " + std::to_string(timeout_s) + " s";
  if (status.code == static_cast<int>(grpc::StatusCode::UNAUTHENTICATED))
    return tool + ": schedd at " + address + " refused the credentials: " + status.message;
  return tool + ": " + status.message;
}

}  // namespace

std::string DescribeRpcError(const std::string& tool, const RpcStatus& status, const std::string& address,
                             int timeout_s) {
  return SafeText(DescribeRaw(tool, status, address, timeout_s));
}

}  // namespace mlsched::cli
