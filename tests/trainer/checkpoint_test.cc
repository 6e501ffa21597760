// Checkpoint encoding, commit protocol, pruning and recovery from incomplete or corrupt steps.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/trainer/test_util.h"
#include "trainer/checkpoint.h"

using namespace mltrain;
using mltrain::testing::ReadFile;
using mltrain::testing::TempDir;

namespace {

const nlohmann::json kConfig = {{"layers", {4, 3}}, {"optimizer", "adamw"}, {"batch_size", 8}};

TrainingState MakeState(int64_t step) {
  TrainingState s;
  s.step = step;
  s.epoch = step / 10;
  s.sample_cursor = step * 8;
  s.seed = 99;
  s.config = kConfig;
  for (int i = 0; i < 15; ++i) {
    s.params.push_back(static_cast<float>(step) + i * 0.5f);
    s.first_moment.push_back(-static_cast<float>(i));
    s.second_moment.push_back(static_cast<float>(i * i));
  }
  return s;
}

}  // namespace

TEST_CASE("Shards round-trip in the safetensors layout", "[trainer][checkpoint]") {
  std::vector<ShardTensor> tensors{{"params", 10, 40, {1.0f, 2.5f, -3.0f}}, {"first_moment", 10, 40, {0.0f, 1e-30f, 7.0f}}};
  auto blob = EncodeShard(tensors, {{"step", "12"}});
  uint64_t header_len = 0;
  std::memcpy(&header_len, blob.data(), 8);
  CHECK(header_len % 8 == 0);
  auto header = nlohmann::json::parse(std::string(blob.begin() + 8, blob.begin() + 8 + static_cast<long>(header_len)));
  CHECK(header["params"]["dtype"] == "F32");
  CHECK(header["__metadata__"]["step"] == "12");
  auto back = DecodeShard(blob);
  REQUIRE(back.size() == 2);
  for (const auto& t : back) {
    const auto& orig = t.name == "params" ? tensors[0] : tensors[1];
    CHECK(t.values == orig.values);
    CHECK(t.begin == 10);
    CHECK(t.total == 40);
  }
  blob.resize(blob.size() - 4);
  CHECK_THROWS_WITH(DecodeShard(blob), Catch::Contains("outside the blob"));
  CHECK_THROWS_WITH(DecodeShard(std::vector<uint8_t>{1, 2}), Catch::Contains("truncated"));
}

TEST_CASE("Save commits shards, then the manifest, then LATEST, and keeps the last K", "[trainer][checkpoint]") {
  TempDir dir;
  LocalDirStore store(dir.path().string());
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 2);
  for (int64_t step : {10, 20, 30}) REQUIRE(ckpt.Save(MakeState(step)));
  CHECK(ckpt.CommittedSteps() == std::vector<int64_t>{20, 30});
  CHECK_FALSE(std::filesystem::exists(dir.path() / "step-10"));
  CHECK(ReadFile(dir / "LATEST") == "step-30");
  auto manifest = nlohmann::json::parse(ReadFile(dir / "step-30/manifest.json"));
  CHECK(manifest["step"] == 30);
  CHECK(manifest["shards"].size() == 1);
  auto loaded = ckpt.Load(kConfig);
  REQUIRE(loaded);
  CHECK(loaded->step == 30);
  CHECK(loaded->params == MakeState(30).params);
  CHECK(loaded->second_moment == MakeState(30).second_moment);
  CHECK(loaded->sample_cursor == 240);
}

TEST_CASE("A half-written or corrupt checkpoint is skipped for the previous one", "[trainer][checkpoint]") {
  TempDir dir;
  LocalDirStore store(dir.path().string());
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 5);
  REQUIRE(ckpt.Save(MakeState(10)));
  REQUIRE(ckpt.Save(MakeState(20)));
  SECTION("shards without a manifest (writer died before the commit)") {
    auto blob = EncodeShard({{"params", 0, 15, std::vector<float>(15, 1.0f)}}, {});
    store.Put("step-30/shard-0", blob);
    store.Put("LATEST", std::vector<uint8_t>{'s', 't', 'e', 'p', '-', '3', '0'});
    auto loaded = ckpt.Load(kConfig);
    REQUIRE(loaded);
    CHECK(loaded->step == 20);
  }
  SECTION("a truncated shard behind a manifest") {
    std::filesystem::resize_file(dir.path() / "step-20/shard-0", 40);
    auto loaded = ckpt.Load(kConfig);
    REQUIRE(loaded);
    CHECK(loaded->step == 10);
    CHECK(loaded->params == MakeState(10).params);
  }
  SECTION("a flipped byte in a shard") {
    std::fstream f(dir / "step-20/shard-0", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
    f.close();
    auto loaded = ckpt.Load(kConfig);
    REQUIRE(loaded);
    CHECK(loaded->step == 10);
  }
  SECTION("a garbage manifest") {
    store.Put("step-20/manifest.json", std::vector<uint8_t>{'{', 'x'});
    auto loaded = ckpt.Load(kConfig);
    REQUIRE(loaded);
    CHECK(loaded->step == 10);
  }
  SECTION("nothing valid at all") {
    std::filesystem::remove(dir.path() / "step-10/manifest.json");
    std::filesystem::remove(dir.path() / "step-20/manifest.json");
    CHECK_FALSE(ckpt.Load(kConfig));
  }
}

TEST_CASE("A checkpoint of another model is an error, not a silent restart", "[trainer][checkpoint]") {
  TempDir dir;
  LocalDirStore store(dir.path().string());
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 2);
  REQUIRE(ckpt.Save(MakeState(10)));
  nlohmann::json other = {{"layers", {4, 5, 3}}, {"optimizer", "adamw"}};
  CHECK_THROWS_WITH(ckpt.Load(other), Catch::Contains("[4,3]") && Catch::Contains("[4,5,3]"));
}

TEST_CASE("Checkpoint URLs", "[trainer][checkpoint]") {
  TempDir dir;
  CHECK(OpenObjectStore("file://" + dir.path().string(), 1 << 20, 1 << 20)->Describe() == "file://" + dir.path().string());
  CHECK_THROWS_WITH(OpenObjectStore("file://relative", 1, 1), Catch::Contains("absolute"));
  CHECK_THROWS_WITH(OpenObjectStore("gs://bucket", 1, 1), Catch::Contains("unsupported"));
  CHECK(ParseStepDir("step-120/shard-3") == 120);
  CHECK(ParseStepDir("step-x/manifest.json") == -1);
  CHECK(ParseStepDir("LATEST") == -1);
}
