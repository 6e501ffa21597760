// Checkpoints to S3: s3rver on loopback behind a proxy that verifies every request's SigV4
// signature with the independent aws4 signer (tools/s3/s3-test-server.js).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/trainer/process_helpers.h"
#include "trainer/s3_store.h"

using namespace mltrain;
using namespace mltrain::testing;

namespace {

std::string FindNode() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin"}) {
    std::string path = std::string(dir) + "/node";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

/// The loopback S3 server; `port` is 0 when it could not be started.
struct S3Server {
  std::unique_ptr<Child> child;
  int port = 0;
  std::string log;

  S3Server(const std::string& node, const TempDir& dir) : log(dir / "s3server.log") {
    std::filesystem::create_directories(dir / "s3data");
    child = std::make_unique<Child>(
        std::vector<std::string>{node, std::string(MLSCHED_S3_TOOLS_DIR) + "/s3-test-server.js", dir / "s3data", "ckpt", "S3RVER", "S3RVER", "us-east-1"},
        std::map<std::string, std::string>{}, log);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && child->Wait(0) == -1) {
      std::string text = ReadFile(log);
      size_t pos = text.find("READY ");
      if (pos != std::string::npos && text.find('\n', pos) != std::string::npos) {
        port = std::stoi(text.substr(pos + 6));
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~S3Server() {
    child->Signal(SIGTERM);
    child->Wait(5);
  }
  std::map<std::string, std::string> Env() const {
    return {{"AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(port)}, {"AWS_REGION", "us-east-1"},
            {"AWS_ACCESS_KEY_ID", "S3RVER"}, {"AWS_SECRET_ACCESS_KEY", "S3RVER"}};
  }
};

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>((i * 7919) >> 3);
  return out;
}

}  // namespace

TEST_CASE("Checkpoints to S3 (s3rver) with SigV4 verified by aws4: PUT, GET, LIST, DELETE, multipart, resume", "[trainer][process][s3]") {
  const std::string node = FindNode();
  const std::string modules = std::string(MLSCHED_S3_TOOLS_DIR) + "/node_modules";
  if (node.empty() || !std::filesystem::exists(modules + "/s3rver") || !std::filesystem::exists(modules + "/aws4")) {
    WARN("SKIPPED: node or " + modules + " (s3rver, aws4) missing; run scripts/install-deps.sh (npm ci in tools/s3)");
    return;
  }
  TempDir dir;
  S3Server server(node, dir);
  INFO(ReadFile(server.log));
  REQUIRE(server.port > 0);
  for (const auto& [k, v] : server.Env()) ::setenv(k.c_str(), v.c_str(), 1);

  SECTION("object operations through the store") {
    S3Store store(S3Location::Parse("s3://ckpt/unit test"), S3Credentials::FromEnv(), 1000, 700);
    auto big = Pattern(2500);  // 4 parts of <= 700 bytes
    store.Put("step-1/shard 0+x", big);
    store.Put("step-1/manifest.json", Pattern(10));
    CHECK(store.Get("step-1/shard 0+x") == big);
    auto keys = store.List("step-1/");
    std::sort(keys.begin(), keys.end());
    CHECK(keys == std::vector<std::string>{"step-1/manifest.json", "step-1/shard 0+x"});
    CHECK_FALSE(store.Get("missing"));
    store.Delete("step-1/manifest.json");
    CHECK_FALSE(store.Get("step-1/manifest.json"));
    CHECK(ReadFile(server.log).find("rejected") == std::string::npos);

    // The verifier does reject a bad signature (so the checks above are not vacuous).
    S3Credentials wrong = S3Credentials::FromEnv();
    wrong.secret_access_key = "not-the-secret";
    S3Store bad(S3Location::Parse("s3://ckpt/unit"), wrong, 1 << 20, 1 << 20);
    CHECK_THROWS_WITH(bad.Put("x", Pattern(5)), Catch::Contains("403") && Catch::Contains("SignatureDoesNotMatch"));
  }

  SECTION("mltrain writes, prunes and resumes from S3") {
    auto args = SmallRunArgs(dir / "unused");
    args.back() = "s3://ckpt/run";
    std::vector<std::string> extra{"--checkpoint-every", "4", "--keep-checkpoints", "2", "--multipart-threshold", "50000",
                                   "--multipart-part-size", "60000"};
    auto first = extra;
    first.insert(first.end(), {"--max-steps", "8"});
    REQUIRE(RunRanks(2, args, first, dir / "a") == std::vector<int>{0, 0});
    auto again = extra;
    again.insert(again.end(), {"--max-steps", "12"});
    REQUIRE(RunRanks(1, args, again, dir / "b") == std::vector<int>{0});
    INFO(DescribeLogs(dir / "b", 1));
    CHECK(ReadFile(dir / "b.0.log").find("resumed from s3://ckpt/run/step-8") != std::string::npos);
    CHECK(ReadFile(server.log).find("rejected") == std::string::npos);

    S3Store store(S3Location::Parse("s3://ckpt/run"), S3Credentials::FromEnv(), 1 << 30, 1 << 30);
    SingleRankCommunicator comm;
    CheckpointManager ckpt(store, comm, 2);
    CHECK(ckpt.CommittedSteps() == std::vector<int64_t>{8, 12});  // step-4 pruned
    auto from_s3 = ckpt.Load({{"layers", {784, 32, 10}}, {"optimizer", "adamw"}});
    REQUIRE(from_s3);
    REQUIRE(RunRanks(1, SmallRunArgs(dir / "local"), {"--max-steps", "12"}, dir / "c") == std::vector<int>{0});
    CHECK(RelativeError(from_s3->params, LoadLatest(dir / "local").params) <= 1e-5);
  }
}
