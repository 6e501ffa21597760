// The tools' calls to schedd (JobService, AdminService), behind a header free of gRPC includes so
// only rpc.cc compiles gRPC's headers. Every call carries the credentials and deadline of
// PrepareContext (common/client.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/server_list.h"
#include "mlsched/v1/admin.pb.h"
#include "mlsched/v1/jobs.pb.h"

namespace mlsched::cli {

/// The outcome of one call: gRPC's numeric status code (0 = OK) and schedd's message.
struct RpcStatus {
  int code = 0;
  std::string message;
  /// When no replica answered (UNAVAILABLE, DEADLINE_EXCEEDED): every address called, in order.
  std::vector<std::string> tried;
  bool ok() const { return code == 0; }
};

/// One interactive session's stream (JobService.Session; proto/mlsched/v1/session.proto), without a
/// deadline. Read and Write may run on two threads at once; Write must not run on two.
class SessionStream {
 public:
  virtual ~SessionStream() = default;
  virtual bool Write(const v1::SessionInput& in) = 0;
  virtual bool Read(v1::SessionOutput* out) = 0;
  virtual void WritesDone() = 0;
  /// The call's status, once Read returned false.
  virtual RpcStatus Finish() = 0;
  /// Ends the call now (Read and Write then fail).
  virtual void Cancel() = 0;
};

/// A connection to schedd for one tool invocation. With several replicas (high availability),
/// every call follows the leader (cli/failover.h): a follower's UNAVAILABLE answer naming a
/// member of the list as leader sends the call there at once, any other UNAVAILABLE to the next
/// member; the retries with backoff below start only after every member was tried.
class SchedClient {
 public:
  /// `server_flag`: the --server value, one address or a comma-separated list of replicas
  /// ("" = $MLSCHED_SERVER or the default socket; see ParseServerList). A bad list is reported
  /// by ConfigError(), and every call then fails with INVALID_ARGUMENT and that message.
  /// `timeout_s`: deadline of each call.
  explicit SchedClient(const std::string& server_flag, int timeout_s = 30);
  /// The replicas `servers` as given (not checked: tests use several Unix sockets).
  SchedClient(ServerList servers, int timeout_s);
  ~SchedClient();
  SchedClient(const SchedClient&) = delete;
  SchedClient& operator=(const SchedClient&) = delete;

  /// The replica that answered the last call ("unix:/path" or "host:port"); before any call, the
  /// one the next call goes to.
  const std::string& Address() const;
  /// Why --server / $MLSCHED_SERVER is unusable; "" when it is fine.
  const std::string& ConfigError() const;

  /// Submits under `submission_key` ("" = a fresh random one: 128 bits, hex) and retries
  /// UNAVAILABLE and DEADLINE_EXCEEDED answers with the same key, backing off 0.25 s doubling to
  /// 4 s, for at most `retry_s` seconds: schedd stores the job once however many tries reach it (a
  /// lost answer, a restart). `on_retry(status, wait_s)` is told before each wait.
  using OnRetry = std::function<void(const RpcStatus&, double)>;
  RpcStatus SubmitJob(const v1::JobSpec& spec, int64_t* job_id, double retry_s = 0, const OnRetry& on_retry = {},
                      const std::string& submission_key = "");
  RpcStatus ListJobs(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp);
  /// Cancels, retrying transient failures like SubmitJob (a cancel is idempotent): on a retry,
  /// "already CANCELLED" for a listed job means an earlier try reached schedd, so the job counts
  /// as cancelled, not as an error. Signal requests (req.signal != 0) are never retried: a signal
  /// delivered twice is not the same as once.
  RpcStatus CancelJobs(const v1::CancelJobsRequest& req, v1::CancelJobsResponse* resp, double retry_s = 0,
                       const OnRetry& on_retry = {});
  RpcStatus GetJob(int64_t job_id, v1::JobInfo* job);
  /// Holds or releases, retrying transient failures like SubmitJob (holding a held job is a no-op).
  RpcStatus HoldJob(int64_t job_id, bool release, double retry_s = 0, const OnRetry& on_retry = {});
  RpcStatus ExplainJob(int64_t job_id, v1::ExplainJobResponse* resp);
  /// Opens a session stream on the replica of the last call (make one first, e.g. GetJob, so
  /// that it is the leader); nullptr when the channel cannot be made (`*error` says why).
  std::unique_ptr<SessionStream> OpenSession(std::string* error);
  /// Binds allocation `job_id` to this process (JobService.WatchAllocation) on the replica of the
  /// last call: the call stays open on a thread of its own until the process exits; schedd cancels
  /// the job a grace period after it ends. Returns "" once the watch is in force, else why not.
  /// `on_event` (optional) gets each later event (idle warnings) on the watch's thread.
  std::string WatchAllocation(int64_t job_id, std::function<void(const v1::WatchAllocationEvent&)> on_event = {});
  /// Starts a step of `ntasks` tasks running `argv` in running job `job_id` (JobService.StartStep);
  /// its id in *step_id.
  RpcStatus StartStep(int64_t job_id, int32_t ntasks, const std::vector<std::string>& argv, int32_t* step_id);
  /// The steps of these jobs that the caller may see (JobService.ListSteps).
  RpcStatus ListSteps(const std::vector<int64_t>& job_ids, v1::ListStepsResponse* resp);
  RpcStatus ListNodes(v1::ListNodesResponse* resp);
  RpcStatus DrainNode(const std::string& node, const std::string& reason, bool resume);
  RpcStatus EvictNode(const std::string& node, int64_t deadline_s);
  RpcStatus ReloadPolicy(v1::ReloadPolicyResponse* resp);
  /// The high-availability state as the first replica that answers sees it (followers answer too).
  RpcStatus HaStatus(v1::HaStatusResponse* resp);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Seconds a CLI retries transient failures (schedd restarting, an answer lost): $MLSCHED_RETRY,
/// else $MLSCHED_SUBMIT_RETRY (its older name), else 15; negative values count as 0.
double RetryBudgetFromEnv();
/// A random submission key: 32 hex digits from getrandom(2).
std::string NewSubmissionKey();

/// The error line for a failed call, prefixed with the tool's name. schedd's message is printed as
/// it came, escaped for the terminal (SafeText: it may echo a user's text, e.g. "unknown partition
/// '\x1b[2J'"); unreachable and timed-out calls name the address:
/// "mlq: cannot reach schedd at unix:/run/mlsched/schedd.sock: <why> (is schedd running? ...)",
/// or every address tried (status.tried) when several replicas were called and none answered.
std::string DescribeRpcError(const std::string& tool, const RpcStatus& status, const std::string& address,
                             int timeout_s);

}  // namespace mlsched::cli
