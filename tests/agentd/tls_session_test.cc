// Fail closed (issue 29): on TCP the agent speaks mutual TLS or not at all. A TLS file that cannot
// be read at a reconnect (a key rotation done as rm + cp) used to make agentd fall back to a
// plaintext channel; a plaintext impostor on schedd's TCP address then had it register and run a
// uid-0 job as root. Now that attempt fails, is logged and retried, and the agent reconnects over
// TLS once the file is back.
#include <catch2/catch.hpp>

#include "common/tls.h"
#include "session_support.h"
#include "tests/security/fixtures.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
namespace fs = std::filesystem;

TEST_CASE("an unreadable node key fails the connection: nothing reaches a plaintext impostor, TLS resumes once it is back",
          "[session][tls]") {
  TempDir dir;
  const fs::path tls = dir.path / "tls";
  REQUIRE(mlsched::testing::MakeCluster(tls, {"n1"}));
  const std::string ca = (tls / "ca.pem").string(), cert = (tls / "nodes/n1.pem").string();
  const std::string key = (tls / "nodes/n1.key").string(), saved = dir.Str("n1.key.saved");

  auto impostor = std::make_unique<FakeSchedd>("127.0.0.1:0", grpc::InsecureServerCredentials());
  const std::string address = "127.0.0.1:" + std::to_string(impostor->Port());
  AgentConfig cfg = Config(dir);
  cfg.servers = {address};
  cfg.tls = {ca, cert, key};
  fs::rename(key, saved);  // the first half of rm + cp
  LogCapture log;
  Agent agent(cfg);
  agent.Start();

  // Many attempts (backoff 50 ms doubling to 400 ms): not one byte of the protocol reaches the impostor.
  std::this_thread::sleep_for(2500ms);
  CHECK(impostor->Received().empty());
  CHECK_FALSE(agent.Connected());
  CHECK_FALSE(impostor->Send(Prepare(dir, 7, 1, "touch " + dir.Str("pwned"), {{}})));  // no stream to send on
  CHECK_FALSE(fs::exists(dir.Str("pwned")));
  CHECK_THAT(log.Text(), Catch::Contains("TLS: cannot read " + key) && Catch::Contains("no connection without TLS"));

  // The key is back and a real schedd (TLS, the cluster CA) serves the same address: the agent
  // connects over mutual TLS, as the node its certificate names.
  impostor->Stop();
  impostor.reset();
  FakeSchedd schedd(address, MakeServerCredentials({ca, (tls / "schedd.pem").string(), (tls / "schedd.key").string()}));
  fs::copy_file(saved, key);
  auto reg = schedd.WaitFor(Registers(), 15s);
  REQUIRE(reg);
  CHECK(reg->register_().name() == "n1");
  CHECK(WaitUntil([&] { return agent.Connected(); }));
  agent.Shutdown();
}
