// NVML through dlopen (agentd/nvml.h), against tests/agentd/fake_nvml.cc: the node's GPU index i
// is the NVML device of minor number i, reads, and the failures of a CPU node.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "agentd/nvml.h"
#include "support.h"

using mlsched::agent::GpuIndicesOf;
using mlsched::agent::Nvml;

TEST_CASE("NVML is loaded with dlopen, GPU i is the device of minor number i", "[nvml]") {
  mlsched::agent::testing::TempDir dir;
  const std::string file = dir.Str("nvml");
  // NVML's order is not the minor numbers' order.
  std::ofstream(file) << "1 80 1000 4000\n0 20 3000 4000\n";
  setenv("MLSCHED_FAKE_NVML", file.c_str(), 1);
  std::string why;
  auto nvml = Nvml::Load(MLSCHED_FAKE_NVML_LIBRARY, &why);
  INFO(why);
  REQUIRE(nvml);
  CHECK(nvml->Devices() == 2);
  auto g0 = nvml->Read(0, &why);
  REQUIRE(g0);
  CHECK(g0->util_percent == 20);
  CHECK(g0->memory_used == 3000);
  CHECK(g0->memory_total == 4000);
  CHECK(nvml->Read(1, &why)->util_percent == 80);
  CHECK_FALSE(nvml->Read(2, &why));
  CHECK(why == "no GPU 2 in NVML");
  CHECK_FALSE(nvml->Read(-1, &why));
  auto both = nvml->ReadAll({0, 1});
  REQUIRE(both);
  CHECK(both->util_percent == 50);
  CHECK(both->memory_used == 4000);
  CHECK_FALSE(nvml->ReadAll({7}));
  // Figures are read at every call.
  std::ofstream(file) << "1 0 0 4000\n0 100 4000 4000\n";
  CHECK(nvml->Read(0, &why)->util_percent == 100);
  nvml.reset();
  // A CPU node: no library, or NVML without a driver.
  CHECK_FALSE(Nvml::Load("libnvidia-ml-that-is-not-here.so.1", &why));
  CHECK_THAT(why, Catch::Contains("cannot load libnvidia-ml-that-is-not-here.so.1"));
  unsetenv("MLSCHED_FAKE_NVML");
  CHECK_FALSE(Nvml::Load(MLSCHED_FAKE_NVML_LIBRARY, &why));
  CHECK(why == "nvmlInit: Driver Not Loaded");
}

TEST_CASE("a task's GPUs are its CUDA_VISIBLE_DEVICES", "[nvml]") {
  CHECK(GpuIndicesOf({"PATH=/bin", "CUDA_VISIBLE_DEVICES=0,2"}) == std::vector<int32_t>{0, 2});
  CHECK(GpuIndicesOf({"CUDA_VISIBLE_DEVICES="}).empty());
  CHECK(GpuIndicesOf({"CUDA_VISIBLE_DEVICES=GPU-8f1c,3"}) == std::vector<int32_t>{3});
  CHECK(GpuIndicesOf({"CUDA_VISIBLE_DEVICES=99999999999"}).empty());
  CHECK(GpuIndicesOf({"NOT_CUDA_VISIBLE_DEVICES=1"}).empty());
}
