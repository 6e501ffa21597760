// The adversarial suite of issue 12: real schedd and agents on TLS with a private CA and munged,
// attacked the way a local user could (as `nobody`, or with hand-made gRPC calls), against root's
// jobs. Each attack must fail with a clear error and change nothing.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <atomic>
#include <thread>

#include "common/client.h"
#include "common/munge.h"
#include "common/tls.h"
#include "mlsched/v1/agent.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "tests/e2e/cluster.h"

using namespace mlsched;
using namespace mlsched::e2e;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kNobody = 65534;

bool CanSwitchUsers() { return ::geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") == 0; }

/// A TLS channel to schedd that sends no MUNGE credential, optionally presenting a certificate.
std::shared_ptr<grpc::Channel> RawChannel(const Cluster& c, const std::string& cert = "", const std::string& key = "",
                                          const std::string& ca = "") {
  TlsFiles f{ca.empty() ? (c.TlsDir() / "ca.pem").string() : ca, cert, key};
  return grpc::CreateChannel(c.TlsAddress(), MakeTlsChannelCredentials(f));
}

/// The value of a Prometheus counter with this exact label set (-1 when absent).
double Metric(const Cluster& c, const std::string& series) {
  RunResult r = Run({"curl", "-sf", c.MetricsUrl()}, 10);
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

grpc::Status CancelWith(const Cluster& c, const std::string& credential, int64_t job) {
  auto stub = v1::JobService::NewStub(RawChannel(c));
  grpc::ClientContext ctx;
  if (!credential.empty()) ctx.AddMetadata(kMungeHeader, credential);
  v1::CancelJobsRequest req;
  req.add_job_ids(job);
  v1::CancelJobsResponse resp;
  return stub->CancelJobs(&ctx, req, &resp);
}

/// An agent session made by hand: register as `node` with the given certificate files.
struct RawAgent {
  grpc::ClientContext ctx;
  std::unique_ptr<v1::AgentService::Stub> stub;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SchedulerMessage>> stream;

  RawAgent(const Cluster& c, const std::string& cert_node, const std::string& node, int cpus = 1) {
    auto dir = c.TlsDir() / "nodes";
    std::string cert = cert_node.empty() ? "" : (dir / (cert_node + ".pem")).string();
    std::string key = cert_node.empty() ? "" : (dir / (cert_node + ".key")).string();
    stub = v1::AgentService::NewStub(RawChannel(c, cert, key));
    stream = stub->Connect(&ctx);
    v1::AgentMessage m;
    auto* r = m.mutable_register_();
    r->set_name(node);
    r->set_address("127.0.0.1");
    r->mutable_capacity()->set_cpu_millis(cpus * 1000);
    r->mutable_capacity()->set_memory_bytes(1LL << 30);
    stream->Write(m);
  }
  /// The first message from schedd; false when schedd closed the stream.
  bool Registered() {
    v1::SchedulerMessage m;
    return stream->Read(&m) && m.has_registered();
  }
  grpc::Status Finish() {
    stream->WritesDone();
    v1::SchedulerMessage m;
    while (stream->Read(&m)) {
    }
    return stream->Finish();
  }
};

}  // namespace

TEST_CASE("on TCP the user is who MUNGE says, never who the client claims", "[e2e][security]") {
  Cluster c("", Transport::kTls);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  fs::permissions(out, fs::perms::all);
  int64_t victim = c.Submit({"-H", "-D", out.string(), "--wrap", "true"});  // root's held job

  SECTION("the old attack: a user header and no credential") {
    auto stub = v1::JobService::NewStub(RawChannel(c));
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-mlsched-user", "root");
    ctx.AddMetadata("x-mlsched-token", "anything-at-all-0123456789");
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_argv("/bin/true");
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
    CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(st.error_message(), Catch::Contains("no MUNGE credential"));
    CHECK(c.Tool("mlq", {"-h", "-t", "all", "-o", "%i"}).out == std::to_string(victim) + "\n");  // no new job
  }
  SECTION("a replayed credential, one made for another call, one from another cluster's key") {
    std::string cred;
    REQUIRE(MungeEncode(c.MungeSocket(), MungePayloadFor("mlsched.v1.JobService", "CancelJobs"), 0, &cred).ok());
    int64_t first = c.Submit({"-H", "-D", out.string(), "--wrap", "true"});
    REQUIRE(CancelWith(c, cred, first).ok());
    CHECK(c.State(first) == "CANCELLED");
    grpc::Status st = CancelWith(c, cred, victim);
    CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(st.error_message(), Catch::Contains("replayed"));

    REQUIRE(MungeEncode(c.MungeSocket(), MungePayloadFor("mlsched.v1.JobService", "GetJob"), 0, &cred).ok());
    st = CancelWith(c, cred, victim);
    CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(st.error_message(), Catch::Contains("not for mlsched.v1.JobService/CancelJobs"));

    fs::path other = c.Dir() / "other-munge";
    fs::create_directories(other);
    REQUIRE(std::system(("mungekey --create --keyfile=" + (other / "k").string() + " && munged --force --socket=" +
                         (other / "s").string() + " --key-file=" + (other / "k").string() + " --pid-file=" +
                         (other / "p").string() + " --log-file=" + (other / "l").string() + " --seed-file=" +
                         (other / "seed").string()).c_str()) == 0);
    REQUIRE(MungeEncode((other / "s").string(), MungePayloadFor("mlsched.v1.JobService", "CancelJobs"), 0, &cred).ok());
    std::system(("kill $(cat " + (other / "p").string() + ")").c_str());
    st = CancelWith(c, cred, victim);
    CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(st.error_message(), Catch::Contains("another key"));

    CHECK(c.State(victim) == "PENDING");
    CHECK(Metric(c, "mlsched_rejected_requests_total{reason=\"authentication\"}") >= 3);
  }
  SECTION("nobody, through the stock tools, acts as nobody") {
    if (!CanSwitchUsers()) {
      WARN("SKIPPED: cannot switch to uid 65534 (needs root and setpriv)");
      return;
    }
    RunResult r = c.ToolAs(kNobody, "mlcancel", {std::to_string(victim)});
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Catch::Contains("permission denied: owned by root"));
    r = c.ToolAs(kNobody, "mlsub", {"--parsable", "-D", out.string(), "--wrap", "id -u > whoami"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    int64_t mine = std::stoll(r.out);
    CHECK(c.Job(mine).value("user", "") == "nobody");
    CHECK(c.State(victim) == "PENDING");
  }
}

TEST_CASE("agents are bound to the node their certificate names", "[e2e][security]") {
  Cluster c("", Transport::kTls);
  c.StartAgent("n1", 2);
  c.MakeNodeCertificate("n2");
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t job = c.Submit({"-n", "1", "-c", "1", "-D", out.string(), "--wrap", "sleep 60"});
  REQUIRE(c.WaitState(job, "RUNNING"));
  auto n1_cpus = [&] {  // everything mladmin says about n1 but its heartbeat time, which ticks every second
    for (auto n : c.Nodes()) {
      if (n.value("name", "") != "n1") continue;
      n.erase("last_heartbeat");
      return n.dump();
    }
    return std::string();
  };
  const std::string n1_before = n1_cpus();

  SECTION("a rogue agent with n2's certificate cannot register as n1") {
    RawAgent rogue(c, "n2", "n1", 512);
    CHECK_FALSE(rogue.Registered());
    grpc::Status st = rogue.Finish();
    CHECK(st.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(st.error_message(), Catch::Contains("names n2, not node 'n1'"));
  }
  SECTION("no certificate, or one from another CA") {
    RawAgent anon(c, "", "n1", 512);
    CHECK_FALSE(anon.Registered());
    CHECK(anon.Finish().error_code() == grpc::StatusCode::UNAUTHENTICATED);

    fs::path other = c.Dir() / "other-ca";
    REQUIRE(std::system(("bash " + std::string(MLSCHED_SOURCE_DIR) + "/scripts/mlsched-certs.sh " + other.string() +
                         " ca >/dev/null && bash " + std::string(MLSCHED_SOURCE_DIR) + "/scripts/mlsched-certs.sh " +
                         other.string() + " node n1 >/dev/null").c_str()) == 0);
    auto stub = v1::AgentService::NewStub(
        RawChannel(c, (other / "nodes/n1.pem").string(), (other / "nodes/n1.key").string()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto s = stub->Connect(&ctx);
    v1::SchedulerMessage m;
    CHECK_FALSE(s->Read(&m));
    CHECK(s->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);  // the TLS handshake fails
  }
  SECTION("forged reports from n2 about n1's task change nothing") {
    RawAgent n2(c, "n2", "n2");
    REQUIRE(n2.Registered());
    auto info = c.Job(job);
    const int attempt = info.value("attempt", 1);
    v1::AgentMessage m;
    m.mutable_task_exited()->set_job_id(job);
    m.mutable_task_exited()->set_attempt(attempt);
    m.mutable_task_exited()->set_rank(0);
    m.mutable_task_exited()->set_exit_code(1);
    REQUIRE(n2.stream->Write(m));
    m.mutable_task_exited()->set_rank(-1);  // "launch failed"
    REQUIRE(n2.stream->Write(m));
    v1::AgentMessage p;
    p.mutable_prepare_result()->set_job_id(job);
    p.mutable_prepare_result()->set_attempt(attempt);
    p.mutable_prepare_result()->set_ok(false);
    REQUIRE(n2.stream->Write(p));
    v1::AgentMessage s;
    s.mutable_task_started()->set_job_id(job);
    s.mutable_task_started()->set_attempt(attempt);
    REQUIRE(n2.stream->Write(s));
    CHECK(WaitFor([&] { return Metric(c, "mlsched_rejected_requests_total{reason=\"agent_message\"}") >= 4; }, 10));
    for (const auto& n : c.Nodes())  // mladmin nodes names the node that sent them
      if (n.value("name", "") == "n2") CHECK(n.value("rejected_reports", 0) >= 4);
    CHECK(c.State(job) == "RUNNING");
    CHECK(c.Job(job).value("attempt", 0) == attempt);
    n2.Finish();
  }
  SECTION("a second session for n2 closes the first (no orphaned agent)") {
    RawAgent first(c, "n2", "n2");
    REQUIRE(first.Registered());
    RawAgent second(c, "n2", "n2");
    REQUIRE(second.Registered());
    v1::SchedulerMessage m;
    bool open = true;
    std::thread reader([&] {
      while (first.stream->Read(&m)) {
      }
      open = false;
    });
    CHECK(WaitFor([&] { return !open; }, 10));
    if (open) first.ctx.TryCancel();
    reader.join();
    second.Finish();
  }
  CHECK(c.State(job) == "RUNNING");
  CHECK(n1_cpus() == n1_before);
  c.Tool("mlcancel", {std::to_string(job)});
}

TEST_CASE("an agent refuses a schedd whose certificate is not from its cluster CA", "[e2e][security]") {
  Cluster real("", Transport::kTls);  // the agent's cluster: its CA and node certificate
  Cluster fake("", Transport::kTls);  // a rogue schedd with a CA of its own
  real.MakeNodeCertificate("n9");
  fs::path work = real.Dir() / "n9";
  fs::create_directories(work);
  const std::string log = (real.Dir() / "n9.log").string();
  pid_t agent = Spawn({MLSCHED_AGENTD_BIN, "--server", fake.TlsAddress(), "--name", "n9", "--cpus", "1", "--mem", "1G",
                       "--work-dir", work.string(), "--tls-cert", (real.TlsDir() / "nodes/n9.pem").string(), "--tls-key",
                       (real.TlsDir() / "nodes/n9.key").string(), "--tls-ca", (real.TlsDir() / "ca.pem").string()},
                      log);
  // It keeps trying and failing the TLS handshake; the fake schedd never sees a node.
  CHECK(WaitFor([&] { return ReadFile(log).find("certificate verify failed") != std::string::npos; }, 15));
  CHECK(fake.Nodes().empty());
  kill(agent, SIGTERM);
  waitpid(agent, nullptr, 0);
}

TEST_CASE("output files honour the submitter's umask", "[e2e][security]") {
  Cluster c;
  c.StartAgent("n1", 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  for (auto [mask, mode] : {std::pair{"077", 0600}, std::pair{"022", 0644}}) {
    RunResult r = Run({"sh", "-c", std::string("umask ") + mask + " && exec " + MLSCHED_MLSUB_BIN + " --parsable -D " +
                                       out.string() + " -o umask-" + mask + ".out --wrap 'echo hi'"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(c.WaitState(std::stoll(r.out), "COMPLETED"));
    CHECK((static_cast<int>(fs::status(out / ("umask-" + std::string(mask) + ".out")).permissions()) & 0777) == mode);
  }
}

namespace {
const char* kEnforcedPolicy = R"(enforce_associations = true
default_partition = "default"
default_qos = "normal"
operators = ["root"]

[[partitions]]
name = "default"

[[qos]]
name = "normal"

[[qos]]
name = "high"

[[accounts]]
name = "physics"
users = ["root"]

[[accounts]]
name = "open"
users = ["nobody"]
allow_qos = ["normal"]
)";
}  // namespace

TEST_CASE("on TCP nobody cannot charge root's account or raise its priority or pick a foreign QoS or read root's env",
          "[e2e][security]") {
  if (!CanSwitchUsers()) {
    WARN("SKIPPED: cannot switch to uid 65534 (needs root and setpriv)");
    return;
  }
  Cluster c(kEnforcedPolicy, Transport::kTls);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  fs::permissions(out, fs::perms::all);
  setenv("MLSCHED_E2E_SECRET", "topsecret-4711", 1);
  int64_t root_job = c.Submit({"-H", "-A", "physics", "-D", out.string(), "--wrap", "echo $MLSCHED_E2E_SECRET"});
  unsetenv("MLSCHED_E2E_SECRET");
  const std::string before = c.Tool("mlq", {"-h", "-t", "all", "-o", "%i %a %T"}).out;
  auto as_nobody = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--parsable", "-H", "-D", out.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--wrap", "true"});
    return c.ToolAs(kNobody, "mlsub", args);
  };

  RunResult r = as_nobody({"-A", "physics"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("may not use account physics") && Catch::Contains("policy.toml:"));
  r = as_nobody({"--nice", "-10000"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("nice"));
  r = as_nobody({"--qos", "high"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("high"));
  CHECK(c.Tool("mlq", {"-h", "-t", "all", "-o", "%i %a %T"}).out == before);  // none of them made a job

  r = as_nobody({});  // no -A: nobody's own (default) account
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(c.Job(std::stoll(r.out)).value("account", "") == "open");

  for (std::vector<std::string> read : {std::vector<std::string>{"mlq", "--json", "-j", std::to_string(root_job)},
                                        std::vector<std::string>{"mladmin", "show", "job", std::to_string(root_job), "--json"},
                                        std::vector<std::string>{"mlq", "--explain", std::to_string(root_job)}}) {
    std::string tool = read.front();
    read.erase(read.begin());
    RunResult seen = c.ToolAs(kNobody, tool, read);
    INFO(tool << " " << seen.err);
    CHECK(seen.exit_code == 0);
    CHECK(seen.out.find("topsecret-4711") == std::string::npos);
    CHECK(seen.out.find("MLSCHED_E2E_SECRET") == std::string::npos);
  }
  // The owner still sees it.
  CHECK(c.Tool("mladmin", {"show", "job", std::to_string(root_job), "--json"}).out.find("topsecret-4711") !=
        std::string::npos);
}

TEST_CASE("oversized input and long id lists are refused at once and nobody else is hurt", "[e2e][security]") {
  Cluster c;
  c.StartAgent("n1", 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t mine = c.Submit({"-H", "-D", out.string(), "--wrap", "true"});

  std::vector<std::string> ids;
  for (int i = 1; i <= 120000; ++i) ids.push_back(std::to_string(i));
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = c.Tool("mlcancel", ids);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("max_ids_per_request"));
  CHECK(took < 5);
  CHECK(c.State(mine) == "PENDING");

  // A 100 KB job name (20 MiB made mlq fail for everyone before), and a request past the 16 MiB message limit.
  r = c.Tool("mlsub", {"-H", "-D", out.string(), "-J", std::string(100000, 'n'), "--wrap", "true"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("max_name_bytes"));
  fs::path big = out / "big.sh";
  std::ofstream(big) << "#!/bin/sh\n" << std::string(17 << 20, '#') << "\n";
  r = c.Tool("mlsub", {"-H", "-D", out.string(), big.string()});
  CHECK(r.exit_code != 0);
  // Everyone else is still served, the node is still up.
  CHECK(c.Tool("mlq", {}).exit_code == 0);
  CHECK(c.State(mine) == "PENDING");
  CHECK(c.Nodes()[0].value("state", "") != "DOWN");
}

namespace {

/// Resident set of a process, bytes (VmRSS of /proc/PID/status; 0 when unreadable).
int64_t RssBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

}  // namespace

TEST_CASE("unauthenticated TCP requests are refused from their headers, before their body is read", "[e2e][security]") {
  Cluster c("", Transport::kTls);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t mine = c.Submit({"-H", "-D", out.string(), "--wrap", "true"});
  // The attack of issue 29: 16 requests of 15 MiB each, with no credential, at once (RSS grew by
  // ~65 MB before: every body was read in full before authentication).
  const int64_t before = RssBytes(c.ScheddPid());
  REQUIRE(before > 0);
  std::vector<std::thread> senders;
  std::atomic<int> refused{0};
  for (int i = 0; i < 16; ++i)
    senders.emplace_back([&] {
      auto stub = v1::JobService::NewStub(RawChannel(c));
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::SubmitJobRequest req;
      req.mutable_spec()->set_script(std::string(15 << 20, '#'));
      v1::SubmitJobResponse resp;
      if (stub->SubmitJob(&ctx, req, &resp).error_code() == grpc::StatusCode::UNAUTHENTICATED) ++refused;
    });
  for (auto& t : senders) t.join();
  const int64_t after = RssBytes(c.ScheddPid());
  CHECK(refused == 16);
  INFO("schedd RSS " << before / 1024 << " KiB -> " << after / 1024 << " KiB");
  CHECK(after - before < (16 << 20));  // not 16 x 15 MiB: at most the transport's stream windows
  CHECK(c.Tool("mlq", {}).exit_code == 0);
  CHECK(c.State(mine) == "PENDING");
  // Several calls on one connection, each with its own credential: each is checked on its own
  // (gRPC shares the auth context between a connection's calls).
  ::setenv("MLSCHED_TLS_CA", (c.TlsDir() / "ca.pem").c_str(), 1);
  ::setenv("MLSCHED_MUNGE_SOCKET", c.MungeSocket().c_str(), 1);
  auto stub = v1::JobService::NewStub(MakeChannel(c.TlsAddress()));
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    grpc::Status st = stub->ListJobs(&ctx, req, &resp);
    INFO("call " << i << ": " << st.error_message());
    CHECK(st.ok());
  }
}
