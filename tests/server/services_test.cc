// A failing store (a full or read-only disk) never takes schedd down (issue 13): the request that
// needed a write is refused with INTERNAL naming SQLite's error, the failure is logged and counted
// (mlsched_internal_errors_total), an agent stream that needed a write is closed (the agent
// reconnects), and reads keep being served. The real services over a real Unix socket.
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "fixtures.h"
#include "mlsched/v1/agent.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "schedd/server/auth.h"
#include "schedd/server/metrics.h"
#include "schedd/server/agent_gateway.h"
#include "schedd/server/services.h"

using namespace mlsched;
using namespace mlsched::server;
using namespace mlsched::server::testing;

namespace {

/// schedd's gRPC services over a store in a temp dir, on DIR/schedd.sock (callers are who the
/// kernel says they are: this test's user).
struct InProcessSchedd {
  TempDir dir;
  SqliteStore store{dir.path.string()};
  PeerCredListener listener{(dir.path / "schedd.sock").string()};
  Authenticator auth{&listener, AuthConfig{}, [](const std::string&) { return false; }};
  AgentGateway gateway{auth};
  Controller ctl{store, gateway, core::PolicySet{}, ControllerConfig{}};
  SchedMetrics metrics;
  JobServiceImpl jobs{ctl, auth};
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  InProcessSchedd() {
    gateway.SetController(&ctl);
    ctl.SetMetrics(&metrics);
    grpc::ServerBuilder builder;
    builder.RegisterService(&jobs);
    builder.RegisterService(&gateway);
    server = builder.BuildAndStart();
    listener.Start(server.get());
    channel = grpc::CreateChannel("unix:" + (dir.path / "schedd.sock").string(), grpc::InsecureChannelCredentials());
  }
  ~InProcessSchedd() {
    listener.Stop();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    gateway.Stop();
  }
  grpc::Status Submit(int64_t* id) {
    auto stub = v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(1);
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
    *id = resp.job_id();
    return st;
  }
  grpc::Status List(v1::ListJobsResponse* resp) {
    auto stub = v1::JobService::NewStub(channel);
    grpc::ClientContext ctx;
    return stub->ListJobs(&ctx, v1::ListJobsRequest{}, resp);
  }
  /// Opens an agent stream for node `name` and registers; the first answer, or the stream's end status.
  /// A node whose agent runs root's jobs too (this test submits as its own user, root in CI).
  grpc::Status Register(const std::string& name, v1::SchedulerMessage* first) {
    v1::RegisterNode reg = NodeReg(name, 4);
    reg.set_root_jobs(true);
    return Register(reg, first);
  }
  grpc::Status Register(const v1::RegisterNode& node, v1::SchedulerMessage* first) {
    auto stub = v1::AgentService::NewStub(channel);
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    v1::AgentMessage reg;
    *reg.mutable_register_() = node;
    if (stream->Write(reg) && stream->Read(first)) {
      stream->WritesDone();
      ctx.TryCancel();
      stream->Finish().ok();
      return grpc::Status::OK;
    }
    stream->WritesDone();
    return stream->Finish();
  }
  /// The value of one series in the metrics text, e.g. Metric("mlsched_internal_errors_total"); -1 if absent.
  double Metric(const std::string& series) {
    std::string text = metrics.Render(ctl.CollectGauges());
    auto at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
  }
  double InternalErrors() { return Metric("mlsched_internal_errors_total"); }
};

}  // namespace

TEST_CASE("a failing store refuses writes with INTERNAL and keeps schedd serving reads", "[server][security]") {
  InProcessSchedd s;
  s.ctl.Recover(WallNow());
  int64_t first = 0;
  REQUIRE(s.Submit(&first).ok());
  CHECK(s.InternalErrors() == 0);

  s.store.RefuseWrites(true);  // the disk is full from here on
  int64_t id = 0;
  grpc::Status st = s.Submit(&id);
  CHECK(st.error_code() == grpc::StatusCode::INTERNAL);
  CHECK_THAT(st.error_message(), Catch::Contains("SubmitJob") && Catch::Contains("readonly"));
  // An agent registering needs a write too: its stream is closed, schedd stays up.
  v1::SchedulerMessage answer;
  st = s.Register("n1", &answer);
  CHECK(st.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(st.error_message(), Catch::Contains("readonly"));
  CHECK(s.InternalErrors() == 2);
  // Reads are served; nothing half-written shows up.
  v1::ListJobsResponse listed;
  REQUIRE(s.List(&listed).ok());
  REQUIRE(listed.jobs_size() == 1);
  CHECK(listed.jobs(0).job_id() == first);
  // The scheduling cycle, with nothing to write, goes on as well.
  s.ctl.Tick(WallNow());
  s.ctl.RunCycle(WallNow());

  s.store.RefuseWrites(false);  // space freed: everything works again, nothing was lost
  REQUIRE(s.Submit(&id).ok());
  CHECK(id > first);
  REQUIRE(s.Register("n1", &answer).ok());
  CHECK(answer.has_registered());
  listed.Clear();
  REQUIRE(s.List(&listed).ok());
  CHECK(listed.jobs_size() == 2);
}

TEST_CASE("an agent registration with over-limit or malformed fields is refused and counted", "[server][security][limits]") {
  InProcessSchedd s;
  s.ctl.Recover(WallNow());
  v1::SchedulerMessage answer;
  auto refused = [&](v1::RegisterNode reg, const std::string& why) {
    grpc::Status st = s.Register(reg, &answer);
    INFO(why << " -> " << st.error_message());
    CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(st.error_message(), Catch::Contains(why));
  };
  refused(NodeReg(std::string(300, 'n'), 4), "node name has 300 bytes; it must have 1 to 253");
  refused(NodeReg("n1/../../etc", 4), "only letters, digits");
  refused(NodeReg("n1\x1b[2J", 4), "only letters, digits");
  v1::RegisterNode big = NodeReg("n1", 4);
  big.set_region(std::string(5000, 'r'));
  refused(big, "region has 5000 bytes; the limit is 256");
  v1::RegisterNode gpus = NodeReg("n1", 4, 1);
  gpus.mutable_capacity()->mutable_gpus(0)->set_count(-3);
  refused(gpus, "GPU entry out of range");
  CHECK(s.Metric("mlsched_rejected_requests_total{reason=\"registration\"}") == 5);
  CHECK(s.ctl.Nodes().empty());
  REQUIRE(s.Register("n1.example-site_2", &answer).ok());
  CHECK(answer.has_registered());
}

namespace {

/// One agent's stream to the in-process schedd, driven by the test.
struct AgentStream {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SchedulerMessage>> stream;
  AgentStream(InProcessSchedd& s, const std::string& node) {
    stream = v1::AgentService::NewStub(s.channel)->Connect(&ctx);
    v1::AgentMessage reg;
    *reg.mutable_register_() = NodeReg(node, 4);
    reg.mutable_register_()->set_root_jobs(true);  // the test submits as its own user: root in CI
    v1::SchedulerMessage answer;
    REQUIRE(stream->Write(reg));
    REQUIRE(stream->Read(&answer));
    REQUIRE(answer.has_registered());
  }
  /// The next scheduler message of type `kind`, skipping others; false when the stream ends.
  bool ReadUntil(v1::SchedulerMessage::MsgCase kind, v1::SchedulerMessage* out) {
    while (stream->Read(out))
      if (out->msg_case() == kind) return true;
    return false;
  }
  bool Send(v1::AgentMessage m, uint64_t seq) {
    m.set_seq(seq);
    return stream->Write(m);
  }
};

v1::AgentMessage TaskExit(int64_t job, int32_t attempt, int32_t code) {
  v1::AgentMessage m;
  m.mutable_task_exited()->set_job_id(job);
  m.mutable_task_exited()->set_attempt(attempt);
  m.mutable_task_exited()->set_exit_code(code);
  return m;
}

}  // namespace

TEST_CASE("a task exit is acknowledged only once durable and a repeat after a store failure completes the job once", "[server][exactly-once]") {
  InProcessSchedd s;
  s.ctl.Recover(WallNow());
  int64_t id = 0;
  {
    auto agent = std::make_unique<AgentStream>(s, "n1");
    REQUIRE(s.Submit(&id).ok());
    s.ctl.RunCycle(WallNow());
    v1::SchedulerMessage m;
    REQUIRE(agent->ReadUntil(v1::SchedulerMessage::kPrepare, &m));
    v1::AgentMessage ok;
    ok.mutable_prepare_result()->set_job_id(id);
    ok.mutable_prepare_result()->set_attempt(1);
    ok.mutable_prepare_result()->set_ok(true);
    REQUIRE(agent->Send(ok, 0));
    REQUIRE(agent->ReadUntil(v1::SchedulerMessage::kCommit, &m));
    v1::AgentMessage started;
    started.mutable_task_started()->set_job_id(id);
    started.mutable_task_started()->set_attempt(1);
    REQUIRE(agent->Send(started, 1));
    REQUIRE(agent->ReadUntil(v1::SchedulerMessage::kAck, &m));
    CHECK(m.ack().seq() == 1);

    s.store.RefuseWrites(true);  // the exit arrives while the disk is full
    REQUIRE(agent->Send(TaskExit(id, 1, 0), 2));
    CHECK_FALSE(agent->ReadUntil(v1::SchedulerMessage::kAck, &m));  // closed, never acknowledged
    CHECK(agent->stream->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  REQUIRE(s.store.LoadJob(id));
  CHECK(s.store.LoadJob(id)->state == "RUNNING");  // not durable, so not acknowledged

  s.store.RefuseWrites(false);
  AgentStream again(s, "n1");  // the agent reconnects and sends the unacknowledged report again
  REQUIRE(again.Send(TaskExit(id, 1, 0), 2));
  v1::SchedulerMessage m;
  REQUIRE(again.ReadUntil(v1::SchedulerMessage::kAck, &m));
  CHECK(m.ack().seq() == 2);
  // Memory already had it COMPLETED; the acknowledgement waited until the disk did too.
  CHECK(s.store.LoadJob(id)->state == "COMPLETED");
  again.ctx.TryCancel();
}

TEST_CASE("agent sessions of one node replacing each other in a tight loop leave schedd sound", "[server][security]") {
  // A new session cancels the one it replaces. That cancel used to reach the old call's
  // ServerContext through a raw pointer after the old handler might have returned (gRPC then
  // destroys the context): a use after free whenever a reconnect raced the end of the old stream.
  // The pointer is now cleared, under the session's mutex, before the old handler returns, and the
  // replacer cancels only while it is set. Four clients churn sessions of node n1 here; each ends
  // its own stream at once, so replacements and handler returns interleave.
  InProcessSchedd s;
  s.ctl.Recover(WallNow());
  std::atomic<int> registered{0}, finished{0};
  std::vector<std::thread> churn;
  for (int t = 0; t < 4; ++t)
    churn.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        grpc::ClientContext ctx;
        auto stream = v1::AgentService::NewStub(s.channel)->Connect(&ctx);
        v1::AgentMessage reg;
        *reg.mutable_register_() = NodeReg("n1", 4);
        v1::SchedulerMessage answer;
        if (stream->Write(reg) && stream->Read(&answer) && answer.has_registered()) ++registered;
        if (i % 2 == 0) stream->WritesDone();  // half of them end cleanly, half are cancelled
        else ctx.TryCancel();
        while (stream->Read(&answer)) {
        }
        stream->Finish();
        ++finished;
      }
    });
  for (auto& t : churn) t.join();
  CHECK(finished == 200);
  CHECK(registered > 0);
  // schedd is still whole: the node registers again, and jobs are served.
  AgentStream last(s, "n1");
  int64_t id = 0;
  CHECK(s.Submit(&id).ok());
  last.ctx.TryCancel();
}

TEST_CASE("at shutdown the gateway ends every agent stream at once and refuses new ones, so the server stops without "
          "waiting out its grace period", "[server]") {
  InProcessSchedd s;
  s.ctl.Recover(WallNow());
  AgentStream a(s, "n1"), b(s, "n2");
  CHECK(s.gateway.CloseStreams(grpc::Status(grpc::StatusCode::UNAVAILABLE, "schedd is shutting down")) == 2);
  for (AgentStream* x : {&a, &b}) {
    v1::SchedulerMessage m;
    while (x->stream->Read(&m)) {
    }
    grpc::Status st = x->stream->Finish();
    CHECK(st.error_code() == grpc::StatusCode::UNAVAILABLE);
    CHECK(st.error_message() == "schedd is shutting down");
  }
  // An agent reconnecting at once on its open connection is ended too, not left in flight.
  v1::SchedulerMessage first;
  grpc::Status again = s.Register("n1", &first);
  CHECK(again.error_code() == grpc::StatusCode::UNAVAILABLE);
  const auto t0 = std::chrono::steady_clock::now();
  s.listener.Stop();
  s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));  // nothing left to wait for
}

TEST_CASE("the Unix listener closes queued connections whose client already hung up, and still serves the live ones",
          "[services][scale]") {
  // A reconnect storm of thousands of agents: most queued connections are attempts their agent
  // already gave up on. Setting up a gRPC transport for each kept the queue full of them until no
  // agent got through (10,000 hollow nodes, issue 30).
  TempDir dir;
  const std::string path = (dir.path / "schedd.sock").string();
  PeerCredListener listener{path};
  constexpr int kStale = 50;
  for (int i = 0; i < kStale; ++i) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    ::close(fd);  // queued, not yet accepted: the client is gone
  }
  grpc::ServerBuilder builder;
  grpc::CallbackGenericService any;  // a server needs a service to start
  builder.RegisterCallbackGenericService(&any);
  auto server = builder.BuildAndStart();
  REQUIRE(server);
  listener.Start(server.get());
  for (int i = 0; i < 500 && listener.Abandoned() < kStale; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(listener.Abandoned() == kStale);
  auto channel = grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials());
  CHECK(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5)));
  CHECK(listener.Abandoned() == kStale);
  listener.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}
