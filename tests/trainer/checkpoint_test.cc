// Checkpoint encoding, commit protocol, pruning and recovery from incomplete or corrupt steps.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/trainer/test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/trainer.h"

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

// --- Crafted checkpoints (issue 13): a hostile shard or manifest must give a clear error, never
// a write past a buffer or a read outside the checkpoint's step directory.

namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A shard blob whose JSON header is `header` verbatim (padded to 8 bytes) followed by `data_bytes`
// zero bytes of tensor data.
std::vector<uint8_t> RawShard(std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// Commits step 30 by hand: step-20's manifest with the step changed and its one shard entry
// pointing at `key` (with `shard`'s true size and CRC-32), and LATEST -> step-30.
void PlantStep30(LocalDirStore& store, const std::string& key, const std::vector<uint8_t>& shard) {
  auto manifest = nlohmann::json::parse(store.Get("step-20/manifest.json").value());
  manifest["step"] = 30;
  manifest["shards"][0]["key"] = key;
  manifest["shards"][0]["bytes"] = shard.size();
  manifest["shards"][0]["crc32"] = Crc32(shard);
  store.Put("step-30/manifest.json", Bytes(manifest.dump()));
  store.Put("LATEST", Bytes("step-30"));
}

}  // namespace

TEST_CASE("A crafted shard whose range overflows is rejected, not written past the buffer", "[trainer][checkpoint][security]") {
  TempDir dir;
  LocalDirStore store(dir.path().string());
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 5);
  REQUIRE(ckpt.Save(MakeState(10)));
  REQUIRE(ckpt.Save(MakeState(20)));
  // begin + size overflows int64 and wraps below total: the old check passed and Load copied the
  // values to params.begin() + begin.
  const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
  auto shard = EncodeShard({{"params", huge, 15, std::vector<float>(15, 1.0f)}}, {});
  CHECK_THROWS_WITH(DecodeShard(shard), Catch::Contains("outside its buffer"));
  store.Put("step-30/shard-0", shard);
  PlantStep30(store, "shard-0", shard);
  auto loaded = ckpt.Load(kConfig);
  REQUIRE(loaded);
  CHECK(loaded->step == 20);
  CHECK(loaded->params == MakeState(20).params);
}

TEST_CASE("Malformed shard headers give clear errors", "[trainer][checkpoint][security]") {
  auto err = [](const std::vector<uint8_t>& blob) {
    try {
      DecodeShard(blob);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string meta = R"("__metadata__":{"t.begin":"0","t.total":"4"})";
  // A header length near 2^64 (8 + len wraps around).
  std::vector<uint8_t> blob(16, 0xff);
  CHECK_THAT(err(blob), Catch::Contains("truncated"));
  // Offsets past the data, reversed, unaligned, negative and non-integer.
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":[0,32]},)" + meta + "}", 16)), Catch::Contains("outside the blob"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":[8,4]},)" + meta + "}", 16)), Catch::Contains("outside the blob"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":[0,6]},)" + meta + "}", 16)), Catch::Contains("outside the blob"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":[-8,8]},)" + meta + "}", 16)), Catch::Contains("data_offsets"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":[0,1e30]},)" + meta + "}", 16)), Catch::Contains("data_offsets"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F32","data_offsets":"x"},)" + meta + "}", 16)), Catch::Contains("data_offsets"));
  CHECK_THAT(err(RawShard(R"({"t":[1,2],)" + meta + "}", 16)), Catch::Contains("'t'"));
  CHECK_THAT(err(RawShard(R"({"t":{"dtype":"F16","data_offsets":[0,8]},)" + meta + "}", 16)), Catch::Contains("not F32"));
  // Range metadata that is missing, not a number, has trailing junk, or lies outside the buffer.
  const std::string t = R"({"t":{"dtype":"F32","data_offsets":[0,16]},)";
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.total":"4"}})", 16)), Catch::Contains("t.begin"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.begin":"x","t.total":"4"}})", 16)), Catch::Contains("t.begin"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.begin":"0x","t.total":"4"}})", 16)), Catch::Contains("t.begin"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.begin":"0","t.total":"99999999999999999999"}})", 16)), Catch::Contains("t.total"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.begin":"1","t.total":"4"}})", 16)), Catch::Contains("outside its buffer"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":{"t.begin":"-1","t.total":"4"}})", 16)), Catch::Contains("outside its buffer"));
  CHECK_THAT(err(RawShard(t + R"("__metadata__":[]})", 16)), Catch::Contains("__metadata__"));
  CHECK_THAT(err(RawShard("[1,2]", 0)), Catch::Contains("not valid JSON"));
  CHECK(err(RawShard(t + R"("__metadata__":{"t.begin":"0","t.total":"4"}})", 16)) == "no error");
  // Too many tensors for a checkpoint shard.
  std::string many = "{";
  for (size_t i = 0; i <= kMaxShardTensors; ++i) many += "\"t" + std::to_string(i) + R"(":{"dtype":"F32","data_offsets":[0,0]},)";
  CHECK_THAT(err(RawShard(many + R"("__metadata__":{}})", 0)), Catch::Contains("tensors"));
}

TEST_CASE("Shard pieces must tile each tensor exactly", "[trainer][checkpoint][security]") {
  auto piece = [](int64_t begin, size_t n) { return ShardTensor{"params", begin, 4, std::vector<float>(n, 1.0f)}; };
  CHECK(AssembleTensors({piece(2, 2), piece(0, 2)}, 4).at("params").size() == 4);
  CHECK_THROWS_WITH(AssembleTensors({piece(0, 2), piece(1, 2)}, 4), Catch::Contains("overlap"));
  CHECK_THROWS_WITH(AssembleTensors({piece(0, 2)}, 4), Catch::Contains("covers 2 of 4"));
  CHECK_THROWS_WITH(AssembleTensors({piece(0, 2), piece(3, 1)}, 4), Catch::Contains("gap"));
  CHECK_THROWS_WITH(AssembleTensors({piece(0, 4)}, 5), Catch::Contains("unexpected"));
  CHECK_THROWS_WITH(AssembleTensors({ShardTensor{"weights", 0, 4, std::vector<float>(4)}}, 4), Catch::Contains("unexpected tensor 'weights'"));
}

TEST_CASE("A manifest's shard keys stay inside the step directory", "[trainer][checkpoint][security]") {
  TempDir dir;
  LocalDirStore store(dir.path().string());
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 5);
  REQUIRE(ckpt.Save(MakeState(10)));
  REQUIRE(ckpt.Save(MakeState(20)));
  SECTION("'../' reaches a valid shard outside step-30/: rejected, the previous checkpoint loads") {
    auto outside = store.Get("step-10/shard-0").value();
    store.Put("outside", outside);
    PlantStep30(store, "../outside", outside);
    auto loaded = ckpt.Load(kConfig);
    REQUIRE(loaded);
    CHECK(loaded->step == 20);
  }
  SECTION("the key rules") {
    for (std::string key : {"shard-0", "shard-17", "sub/shard-1", "a.b_c-D"}) CHECK(IsSafeShardKey(key));
    for (std::string key : {"", "/etc/passwd", "..", "../x", "a/../../x", "a/..", "./x", "a//b", "a/", "x\\..\\y", "sp ace"})
      CHECK_FALSE(IsSafeShardKey(key));
    CHECK_FALSE(IsSafeShardKey(std::string("a\0b", 3)));
    CHECK(IsSafeShardKey(std::string(kMaxShardKeyBytes, 'k')));
    CHECK_FALSE(IsSafeShardKey(std::string(kMaxShardKeyBytes + 1, 'k')));
  }
  SECTION("ParseManifest names the bad key and the bad fields") {
    auto manifest = nlohmann::json::parse(store.Get("step-20/manifest.json").value());
    std::string error;
    CHECK(ParseManifest(Bytes(manifest.dump()), &error));
    manifest["shards"][0]["key"] = "/etc/shadow";
    CHECK_FALSE(ParseManifest(Bytes(manifest.dump()), &error));
    CHECK_THAT(error, Catch::Contains("/etc/shadow"));
    manifest["shards"][0]["key"] = "shard-0";
    manifest["shards"][0]["bytes"] = 1e30;
    CHECK_FALSE(ParseManifest(Bytes(manifest.dump()), &error));
    CHECK_THAT(error, Catch::Contains("bytes"));
    manifest["shards"][0]["bytes"] = 10;
    manifest["parameter_count"] = -1;
    CHECK_FALSE(ParseManifest(Bytes(manifest.dump()), &error));
    CHECK_THAT(error, Catch::Contains("parameter_count"));
    CHECK_FALSE(ParseManifest(Bytes("[]"), &error));
  }
}

TEST_CASE("Empty tensors encode and decode", "[trainer][checkpoint][fuzz]") {
  // Found by fuzz/checkpoint_shard_fuzz.cc: EncodeShard passed an empty vector's null data() to
  // memcpy (UB even for 0 bytes); a rank whose block is empty writes such a tensor.
  auto blob = EncodeShard({{"params", 4, 4, {}}, {"first_moment", 0, 4, {1.0f, 2.0f}}}, {});
  auto back = DecodeShard(blob);
  REQUIRE(back.size() == 2);
  CHECK(back[0].name == "first_moment");
  CHECK(back[1].values.empty());
  CHECK(back[1].begin == 4);
}

TEST_CASE("StopReason reads the first word of the scheduler's stop-reason file", "[trainer][elastic]") {
  TempDir dir;
  CHECK(StopReason("").empty());
  CHECK(StopReason(dir / "missing").empty());
  std::ofstream(dir / "r") << "resize\n";
  CHECK(StopReason(dir / "r") == "resize");
  std::ofstream(dir / "long") << std::string(100, 'x');
  CHECK(StopReason(dir / "long").size() == static_cast<size_t>(kMaxStopReasonBytes));
}
