// SchedClient following the leader over real in-process gRPC JobService replicas on Unix sockets:
// a follower answers UNAVAILABLE and names the leader in x-mlsched-leader; the call lands on the
// leader, a hint outside the list is ignored, a dead member is skipped, the submission key stays
// the same on every hop, and an error names every replica tried.
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>

#include "cli/rpc.h"
#include "mlsched/v1/jobs.grpc.pb.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

std::string TempSocket(const std::string& tag) {
  return "/tmp/cli-ha-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()) + ".sock";
}

/// One replica: the leader answers; a follower (leader_hint set) refuses with UNAVAILABLE and names it.
class Replica final : public v1::JobService::Service {
 public:
  explicit Replica(std::string hint = "", bool follower = false, bool lost = false)
      : hint_(std::move(hint)), follower_(follower), lost_(lost) {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~Replica() override {
    server_->Shutdown();
    ::unlink(socket.c_str());
  }
  std::string Address() const { return "unix:" + socket; }

  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest*, v1::ListJobsResponse*) override {
    ++calls;
    return Answer(ctx);
  }
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    ++calls;
    {
      std::lock_guard lk(mu);
      keys.push_back(req->submission_key());
    }
    resp->set_job_id(42);
    return Answer(ctx);
  }

  grpc::Status CancelJobs(grpc::ServerContext* ctx, const v1::CancelJobsRequest*, v1::CancelJobsResponse*) override {
    ++calls;
    return Answer(ctx);
  }

  const std::string socket = TempSocket("replica");
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<std::string> keys;

 private:
  grpc::Status Answer(grpc::ServerContext* ctx) {
    if (lost_) return {grpc::StatusCode::UNAVAILABLE, "Socket closed"};  // done, but the answer was lost
    if (!follower_) return grpc::Status::OK;
    ctx->AddTrailingMetadata("x-mlsched-leader", hint_);
    return {grpc::StatusCode::UNAVAILABLE, "schedd at " + Address() + " is a follower; the leader is " + hint_ + " (epoch 42)"};
  }
  std::string hint_;
  bool follower_;
  bool lost_;
  std::unique_ptr<grpc::Server> server_;
};

/// A wedged replica (stopped with SIGSTOP, a hung host): the kernel accepts connections into the
/// listen backlog, but nothing ever answers the handshake.
class WedgedReplica {
 public:
  WedgedReplica() {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", socket.c_str());
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
  }
  ~WedgedReplica() {
    ::close(fd_);
    ::unlink(socket.c_str());
  }
  std::string Address() const { return "unix:" + socket; }
  const std::string socket = TempSocket("wedged");

 private:
  int fd_ = -1;
};

ServerList List(std::vector<std::string> addresses) { return ServerList{std::move(addresses)}; }

}  // namespace

TEST_CASE("a follower's hint sends the call to the leader", "[cli][ha]") {
  Replica leader;
  Replica follower(leader.Address(), true);
  Replica other;  // first in the list: answers only after the follower hinted past it
  SchedClient client(List({follower.Address(), other.Address(), leader.Address()}), 5);
  v1::ListJobsResponse resp;
  RpcStatus st = client.ListJobs({}, &resp);
  REQUIRE(st.ok());
  CHECK(follower.calls == 1);
  CHECK(other.calls == 0);
  CHECK(leader.calls == 1);
  CHECK(client.Address() == leader.Address());
  // The next call goes straight to the leader.
  REQUIRE(client.ListJobs({}, &resp).ok());
  CHECK(follower.calls == 1);
  CHECK(leader.calls == 2);
}

TEST_CASE("a hint naming a replica outside the list is ignored", "[cli][ha]") {
  Replica outsider;  // answers, but is not in the list
  Replica follower(outsider.Address(), true);
  Replica leader;
  SchedClient client(List({follower.Address(), leader.Address()}), 5);
  v1::ListJobsResponse resp;
  REQUIRE(client.ListJobs({}, &resp).ok());
  CHECK(outsider.calls == 0);
  CHECK(leader.calls == 1);
  CHECK(client.Address() == leader.Address());
}

TEST_CASE("a dead first replica is skipped and a submission keeps its key on every hop", "[cli][ha]") {
  Replica leader;
  Replica follower(leader.Address(), true);
  const std::string dead = "unix:" + TempSocket("dead");
  SchedClient client(List({dead, follower.Address(), leader.Address()}), 5);
  v1::JobSpec spec;
  int64_t id = 0;
  RpcStatus st = client.SubmitJob(spec, &id, /*retry_s=*/0);
  REQUIRE(st.ok());
  CHECK(id == 42);
  CHECK(client.Address() == leader.Address());
  REQUIRE(follower.keys.size() == 1);
  REQUIRE(leader.keys.size() == 1);
  CHECK(follower.keys[0] == leader.keys[0]);
  CHECK(follower.keys[0].size() == 32);
}

TEST_CASE("when no replica answers the error names every address tried", "[cli][ha]") {
  const std::string a = "unix:" + TempSocket("dead-a"), b = "unix:" + TempSocket("dead-b");
  SchedClient client(List({a, b}), 5);
  v1::ListJobsResponse resp;
  RpcStatus st = client.ListJobs({}, &resp);
  REQUIRE(st.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  CHECK(st.tried == std::vector<std::string>{a, b});
  const std::string msg = DescribeRpcError("mlq", st, client.Address(), 5);
  CHECK_THAT(msg, Catch::StartsWith("mlq: no schedd leader answered at " + a + ", " + b + ": "));
}

TEST_CASE("a bad server list is a configuration error and no call is made", "[cli][ha]") {
  SchedClient client("a:7000,unix:/run/s.sock", 5);
  CHECK_THAT(client.ConfigError(), Catch::Contains("cannot be part of a list"));
  v1::ListJobsResponse resp;
  RpcStatus st = client.ListJobs({}, &resp);
  CHECK(st.code == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
}

TEST_CASE("a signal hops past dead replicas and followers but never after a lost answer", "[cli][ha]") {
  Replica leader;
  Replica follower(leader.Address(), true);
  const std::string dead = "unix:" + TempSocket("dead");
  v1::CancelJobsRequest req;
  req.add_job_ids(7);
  req.set_signal(10);
  v1::CancelJobsResponse resp;
  SchedClient client(List({dead, follower.Address(), leader.Address()}), 5);
  REQUIRE(client.CancelJobs(req, &resp, 5).ok());
  CHECK(follower.calls == 1);
  CHECK(leader.calls == 1);

  Replica lost("", false, true);
  SchedClient unsure(List({lost.Address(), leader.Address()}), 5);
  RpcStatus st = unsure.CancelJobs(req, &resp, 5);
  CHECK(st.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  CHECK(lost.calls == 1);
  CHECK(leader.calls == 1);
}

TEST_CASE("a wedged replica costs a connect timeout and not the call's deadline", "[cli][ha]") {
  WedgedReplica wedged, wedged_too;
  Replica leader;
  // gRPC alone would hold the call at a wedged replica for its 20 s connect timeout or the call's
  // deadline; the bound names itself in the error when no replica completes a handshake.
  SchedClient stuck(List({wedged.Address(), wedged_too.Address()}), 60);
  v1::ListJobsResponse resp;
  RpcStatus st = stuck.ListJobs({}, &resp);
  REQUIRE(st.code == static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  CHECK_THAT(st.message, Catch::Contains("no answer to the connection within 3 s"));
  CHECK(st.tried == std::vector<std::string>{wedged.Address(), wedged_too.Address()});

  // Nothing reached the wedged replica, so the call (even a signal) hops on to the leader.
  SchedClient client(List({wedged.Address(), leader.Address()}), 60);
  REQUIRE(client.ListJobs({}, &resp).ok());
  CHECK(leader.calls == 1);
  CHECK(client.Address() == leader.Address());
  v1::CancelJobsRequest req;
  req.add_job_ids(7);
  req.set_signal(10);
  v1::CancelJobsResponse cancel;
  SchedClient signal(List({wedged.Address(), leader.Address()}), 60);
  REQUIRE(signal.CancelJobs(req, &cancel).ok());
  CHECK(leader.calls == 2);
}
