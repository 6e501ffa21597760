// Fashion-MNIST IDX reader: real files, hand-made small files, and malformed ones.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <filesystem>

#include "tests/trainer/test_util.h"
#include "trainer/config.h"
#include "trainer/dataset.h"

using namespace mltrain;
using mltrain::testing::TempDir;

namespace {

void WriteGz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> Header(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words) {
    out.push_back(static_cast<uint8_t>(w >> 24));
    out.push_back(static_cast<uint8_t>(w >> 16));
    out.push_back(static_cast<uint8_t>(w >> 8));
    out.push_back(static_cast<uint8_t>(w));
  }
  return out;
}

}  // namespace

TEST_CASE("IDX reader decodes a small hand-made file pair", "[trainer][data]") {
  TempDir dir;
  auto images = Header({0x803, 3, 2, 2});
  for (uint8_t v : {0, 255, 51, 102, 1, 2, 3, 4, 5, 6, 7, 8}) images.push_back(v);
  auto labels = Header({0x801, 3});
  for (uint8_t v : {9, 0, 4}) labels.push_back(v);
  WriteGz(dir / "img.gz", images);
  WriteGz(dir / "lab.gz", labels);
  Dataset ds = LoadIdxPair(dir / "img.gz", dir / "lab.gz", 0);
  CHECK(ds.count == 3);
  CHECK(ds.features == 4);
  CHECK(ds.images[1] == Approx(1.0f));
  CHECK(ds.images[2] == Approx(0.2f));
  CHECK(ds.labels == std::vector<uint8_t>{9, 0, 4});
  Dataset two = LoadIdxPair(dir / "img.gz", dir / "lab.gz", 2);
  CHECK(two.count == 2);
  CHECK(two.images.size() == 8);
}

TEST_CASE("IDX reader names the file and the problem on bad input", "[trainer][data]") {
  TempDir dir;
  auto labels = Header({0x801, 2});
  labels.push_back(1);
  labels.push_back(2);
  WriteGz(dir / "lab.gz", labels);
  SECTION("missing file") {
    CHECK_THROWS_WITH(LoadIdxPair(dir / "nope.gz", dir / "lab.gz", 0), Catch::Contains("nope.gz") && Catch::Contains("--data-dir"));
  }
  SECTION("wrong magic") {
    WriteGz(dir / "img.gz", Header({0x801, 2, 1, 1}));
    CHECK_THROWS_WITH(LoadIdxPair(dir / "img.gz", dir / "lab.gz", 0), Catch::Contains("img.gz") && Catch::Contains("not an IDX image"));
  }
  SECTION("truncated pixels") {
    auto img = Header({0x803, 2, 2, 2});
    img.push_back(1);
    WriteGz(dir / "img.gz", img);
    CHECK_THROWS_WITH(LoadIdxPair(dir / "img.gz", dir / "lab.gz", 0), Catch::Contains("truncated"));
  }
  SECTION("count mismatch") {
    auto img = Header({0x803, 3, 1, 1});
    for (int i = 0; i < 3; ++i) img.push_back(0);
    WriteGz(dir / "img.gz", img);
    CHECK_THROWS_WITH(LoadIdxPair(dir / "img.gz", dir / "lab.gz", 0), Catch::Contains("disagree"));
  }
  SECTION("label out of range") {
    auto img = Header({0x803, 2, 1, 1});
    img.push_back(0);
    img.push_back(0);
    WriteGz(dir / "img.gz", img);
    auto bad = Header({0x801, 2});
    bad.push_back(1);
    bad.push_back(10);
    WriteGz(dir / "bad.gz", bad);
    CHECK_THROWS_WITH(LoadIdxPair(dir / "img.gz", dir / "bad.gz", 0), Catch::Contains("label 10"));
  }
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist loads", "[trainer][data]") {
  if (!std::filesystem::exists(std::string(kDefaultFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping (run scripts/install-deps.sh)");
    return;
  }
  Dataset test = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTest, 0);
  CHECK(test.count == 10000);
  CHECK(test.features == 784);
  Dataset train = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain, 100);
  CHECK(train.count == 100);
  CHECK(*std::max_element(train.images.begin(), train.images.end()) <= 1.0f);
}

TEST_CASE("Command-line value parsers", "[trainer][config]") {
  CHECK(ParseCheckpointInterval("500").steps == 500);
  CHECK(ParseCheckpointInterval("30s").seconds == 30);
  CHECK(ParseCheckpointInterval("2m").seconds == 120);
  CHECK_THROWS_WITH(ParseCheckpointInterval("5h"), Catch::Contains("unknown unit"));
  CHECK_THROWS_AS(ParseCheckpointInterval("-1"), std::invalid_argument);
  CHECK(ParseHiddenSizes("256,128") == std::vector<int>{256, 128});
  CHECK_THROWS_WITH(ParseHiddenSizes("256,x"), Catch::Contains("'x'"));
  TrainerConfig c;
  c.batch_size = 3;
  CHECK_THROWS_WITH(c.Validate(4), Catch::Contains("--batch-size 3"));
}
