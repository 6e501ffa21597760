// What agentd's node health checks cost (agentd/health.h): the first scan of the kernel log (every
// record the ring buffer holds), a quick check as before each prepare (new kernel-log records and
// statvfs of the work directories), and a full round with NVML's GPU and ECC queries. Prints one
// line per figure: name, calls, microseconds per call (median and p99).
//   health_bench [--kmsg /dev/kmsg] [--nvml-library PATH --gpus N] [--calls 2000]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "agentd/health.h"
#include "agentd/kmsg.h"
#include "agentd/nvml.h"

using namespace mlsched::agent;
using Clock = std::chrono::steady_clock;

namespace {

void Report(const char* name, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  std::printf("%-34s calls=%zu p50_us=%.1f p99_us=%.1f\n", name, us.size(), us[us.size() / 2], us[us.size() * 99 / 100]);
}

template <typename F>
std::vector<double> Time(int calls, F&& f) {
  std::vector<double> us;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"agentd health check costs"};
  std::string kmsg = "/dev/kmsg", library;
  int gpus = 8, calls = 2000;
  app.add_option("--kmsg", kmsg);
  app.add_option("--nvml-library", library, "NVML (e.g. the tests' libfake-nvml.so with MLSCHED_FAKE_NVML set)");
  app.add_option("--gpus", gpus);
  app.add_option("--calls", calls);
  CLI11_PARSE(app, argc, argv);

  std::string error;
  size_t records = 0;
  auto first = Time(1, [&] {
    KmsgReader r(kmsg);
    records = r.Read(&error).size();
  });
  std::printf("%-34s records=%zu us=%.0f %s\n", "kernel log: first scan", records, first[0], error.c_str());

  std::unique_ptr<Nvml> nvml;
  if (!library.empty()) {
    nvml = Nvml::Load(library, &error);
    if (!nvml) std::printf("NVML: %s\n", error.c_str());
  }
  HealthConfig cfg;
  cfg.kmsg = kmsg;
  cfg.disk_dirs = {"/tmp", "/var/tmp"};
  cfg.expected_gpus = nvml ? gpus : 0;
  cfg.interval = std::chrono::seconds(3600);
  HealthMonitor monitor(cfg, nvml.get(), "", nullptr);
  monitor.CheckQuick();  // the first scan of the kernel log
  Report("quick check (before a prepare)", Time(calls, [&] { monitor.CheckQuick(); }));
  if (nvml)
    Report("NVML health of every GPU", Time(calls, [&] {
             for (int i = 0; i < gpus; ++i) nvml->Health(i);
           }));
  return 0;
}
