// The CLI's retries of transient failures against a fake JobService on a Unix socket: a cancel
// whose answer was lost is retried and "already CANCELLED" then counts as done; signals are never
// sent twice; holds are retried.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <random>

#include "cli/rpc.h"
#include "mlsched/v1/jobs.grpc.pb.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

/// Fails the first `fail_first` calls of each method with UNAVAILABLE (after doing the work, as
/// when the answer is lost), then answers like schedd would for job 7, cancelled by the first try.
class FlakyJobs final : public v1::JobService::Service {
 public:
  std::atomic<int> cancels{0}, holds{0};
  int fail_first = 1;
  grpc::Status CancelJobs(grpc::ServerContext*, const v1::CancelJobsRequest* req, v1::CancelJobsResponse* resp) override {
    if (++cancels <= fail_first) return {grpc::StatusCode::UNAVAILABLE, "answer lost"};
    for (int64_t id : req->job_ids()) resp->add_errors("job " + std::to_string(id) + (id == 7 ? ": already CANCELLED" : ": already COMPLETED"));
    return grpc::Status::OK;
  }
  grpc::Status HoldJob(grpc::ServerContext*, const v1::HoldJobRequest*, v1::HoldJobResponse*) override {
    if (++holds <= fail_first) return {grpc::StatusCode::UNAVAILABLE, "answer lost"};
    return grpc::Status::OK;
  }
  // A refusal that echoes what a user typed, as "unknown partition '...'" does.
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::JobInfo*) override {
    return {grpc::StatusCode::INVALID_ARGUMENT, "unknown partition '\x1b]0;pwned\x07\x1b[2J\r\xc2\x9b\xff'"};
  }
};

struct Server {
  std::string socket = "/tmp/cli-retry-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) + ".sock";
  FlakyJobs jobs;
  std::unique_ptr<grpc::Server> server;
  Server() {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    b.RegisterService(&jobs);
    server = b.BuildAndStart();
  }
  ~Server() {
    server->Shutdown();
    ::unlink(socket.c_str());
  }
};

}  // namespace

TEST_CASE("a retried cancel counts already CANCELLED as done and keeps other errors", "[cli][retry]") {
  Server s;
  SchedClient client("unix:" + s.socket, 5);
  v1::CancelJobsRequest req;
  req.add_job_ids(7);
  req.add_job_ids(8);
  v1::CancelJobsResponse resp;
  int retries = 0;
  RpcStatus st = client.CancelJobs(req, &resp, 5, [&](const RpcStatus&, double) { ++retries; });
  REQUIRE(st.ok());
  CHECK(retries == 1);
  REQUIRE(resp.cancelled_size() == 1);
  CHECK(resp.cancelled(0) == 7);
  REQUIRE(resp.errors_size() == 1);
  CHECK(resp.errors(0) == "job 8: already COMPLETED");
}

TEST_CASE("a signal is never retried and a hold is", "[cli][retry]") {
  Server s;
  SchedClient client("unix:" + s.socket, 5);
  v1::CancelJobsRequest req;
  req.add_job_ids(7);
  req.set_signal(10);
  v1::CancelJobsResponse resp;
  RpcStatus st = client.CancelJobs(req, &resp, 5);
  CHECK(st.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  CHECK(s.jobs.cancels == 1);
  CHECK(client.HoldJob(7, false, 5).ok());
  CHECK(s.jobs.holds == 2);
}

TEST_CASE("without a retry budget the first failure is final", "[cli][retry]") {
  Server s;
  SchedClient client("unix:" + s.socket, 5);
  CHECK_FALSE(client.HoldJob(7, true, 0).ok());
  CHECK(s.jobs.holds == 1);
}

TEST_CASE("schedd's error messages are printed escaped: they may echo another user's text", "[cli][retry][security]") {
  Server s;
  SchedClient client("unix:" + s.socket, 5);
  v1::JobInfo job;
  RpcStatus st = client.GetJob(1, &job);
  REQUIRE(st.code == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  CHECK(DescribeRpcError("mladmin", st, client.Address(), 5) ==
        "mladmin: unknown partition '\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u009b\\xff'");
  st.code = static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  CHECK(DescribeRpcError("mlq", st, "unix:/s", 5).find('\x1b') == std::string::npos);
}
