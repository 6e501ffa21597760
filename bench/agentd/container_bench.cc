// Container benchmarks (issue 31, point 7), driving agentd's own components on this machine: the
// task driver with and without a container (ProcessSupervisor alone vs ContainerDriver around it,
// both with task cgroups), the image cache against a local registry, and mltrain bare vs in its
// image. Run by container_bench.sh, which starts the registry and pushes the images.
//   container_bench --registry 127.0.0.1:PORT --cert-dir DIR --work DIR --mltrain PATH [--starts 50]
// Prints one line per figure.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "agentd/cgroups.h"
#include "agentd/container_driver.h"
#include "agentd/image_cache.h"
#include "agentd/supervisor.h"

using namespace mlsched;
using namespace mlsched::agent;
using Clock = std::chrono::steady_clock;

namespace {

struct Runner {
  std::mutex mu;
  std::condition_variable cv;
  std::map<TaskKey, ExitReport> exits;
  std::unique_ptr<TaskDriver> driver;
  std::unique_ptr<Cgroups> cgroups;

  Runner(const ContainerTools& tools, const std::string& state) {
    auto layout = DetectCgroups();
    if (layout.version != 0) {
      cgroups = std::make_unique<Cgroups>(layout, "mlsched-bench");
      if (!cgroups->Init().empty()) cgroups.reset();
    }
    auto make = [](TaskDriver::StartedFn s, TaskDriver::ExitedFn e) {
      return std::make_unique<ProcessSupervisor>(std::move(s), std::move(e), false);
    };
    driver = std::make_unique<ContainerDriver>(tools, state, make, [](const TaskKey&, pid_t) {},
                                               [this](const TaskKey& k, pid_t, const ExitReport& r) {
                                                 std::lock_guard lk(mu);
                                                 exits[k] = r;
                                                 cv.notify_all();
                                               });
    if (cgroups) driver->UseCgroups(cgroups.get());
    driver->Start();
  }
  ~Runner() {
    driver->Stop();
    if (cgroups) cgroups->Clear(2000, true);
  }
  /// Seconds from Spawn to the reported exit; the exit report in *out.
  double Run(const TaskKey& key, LaunchRequest r, ExitReport* out) {
    auto t0 = Clock::now();
    driver->Spawn(key, std::move(r));
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return exits.count(key) > 0; });
    *out = exits[key];
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

LaunchRequest Request(const std::string& out_dir, std::vector<std::string> argv) {
  LaunchRequest r;
  r.executable = argv[0];
  r.argv = std::move(argv);
  r.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  r.workdir = out_dir;
  r.stdout_path = out_dir + "/task.out";
  r.stderr_path = r.stdout_path;
  r.switch_user = true;
  r.uid = 65534;
  r.gid = 65534;
  return r;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

std::shared_ptr<const CachedImage> Pull(ImageCache& cache, const std::string& ref, PullReport* report) {
  bool transient = false;
  auto got = cache.Acquire(ref, [](const std::string&) {}, report, &transient);
  if (!got) throw std::runtime_error(got.error);
  return *got.value;
}

double SamplesPerSecond(const std::string& metrics) {
  std::ifstream in(metrics);
  if (!in) return 0;
  return nlohmann::json::parse(in).value("samples_per_s", 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"container start, pull and training benchmarks"};
  std::string registry, cert_dir, work, mltrain;
  int starts = 50, mltrain_runs = 2;
  app.add_option("--registry", registry)->required();
  app.add_option("--cert-dir", cert_dir)->required();
  app.add_option("--work", work)->required();
  app.add_option("--mltrain", mltrain)->required();
  app.add_option("--starts", starts);
  app.add_option("--mltrain-runs", mltrain_runs);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  std::filesystem::create_directories(work);
  const std::string out = work + "/out";
  std::filesystem::create_directories(out);
  chmod(out.c_str(), 01777);
  ContainerTools tools = DetectContainerTools();
  if (!tools.Usable()) {
    std::printf("SKIPPED: container tools missing: %s\n", tools.missing.c_str());
    return 0;
  }

  // Cold pulls of the ~100 MB image: one task, then 4 tasks at once on a fresh cache.
  for (int concurrent : {1, 4}) {
    const std::string dir = work + "/cache-cold-" + std::to_string(concurrent);
    std::filesystem::remove_all(dir);
    ImageCache cache({dir, 0, cert_dir, std::chrono::seconds(600)}, tools);
    if (auto err = cache.Init(); !err.empty()) throw std::runtime_error(err);
    std::vector<std::thread> threads;
    std::vector<PullReport> reports(static_cast<size_t>(concurrent));
    auto t0 = Clock::now();
    for (int i = 0; i < concurrent; ++i)
      threads.emplace_back([&, i] { Pull(cache, "docker://" + registry + "/bench-big:1", &reports[static_cast<size_t>(i)]); });
    for (auto& t : threads) t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    int fetched = 0;
    int64_t bytes = 0;
    for (const auto& r : reports) {
      fetched += r.cached ? 0 : 1;
      bytes += r.fetched_bytes;
    }
    std::printf("cold pull+unpack, %d concurrent task(s): %.2f s wall, %d pull(s), %.0f MB fetched, %.0f MB unpacked\n",
                concurrent, s, fetched, static_cast<double>(bytes) / 1e6,
                static_cast<double>(cache.UsedBytes()) / 1e6);
  }

  // Start overhead, warm cache: an empty task (/bin/true) bare and in the busybox image, alternating.
  ImageCache cache({work + "/cache", 0, cert_dir, std::chrono::seconds(600)}, tools);
  if (auto err = cache.Init(); !err.empty()) throw std::runtime_error(err);
  PullReport report;
  auto busybox = Pull(cache, "docker://" + registry + "/busybox:1", &report);
  auto mltrain_image = Pull(cache, "docker://" + registry + "/mltrain:bench", &report);
  Runner runner(tools, work + "/containers");
  std::vector<double> bare, ctr;
  int64_t job = 1;
  for (int i = 0; i < starts; ++i) {
    ExitReport e;
    bare.push_back(runner.Run({job++, 1, 0}, Request(out, {"/bin/true"}), &e));
    if (e.exit_code != 0) throw std::runtime_error("bare task: " + e.error);
    LaunchRequest r = Request(out, {"/bin/true"});
    r.container = std::make_shared<ContainerLaunch>();
    r.container->image = busybox;
    r.container->image_ref = "docker://" + registry + "/busybox:1";
    ctr.push_back(runner.Run({job++, 1, 0}, std::move(r), &e));
    if (e.exit_code != 0) throw std::runtime_error("container task: " + e.error + " (see " + out + "/task.out)");
  }
  std::printf("empty task spawn->exit over %d starts: bare p50 %.1f ms p90 %.1f ms; container p50 %.1f ms p90 %.1f ms; "
              "overhead p50 %.1f ms\n",
              starts, Percentile(bare, 0.5) * 1e3, Percentile(bare, 0.9) * 1e3, Percentile(ctr, 0.5) * 1e3,
              Percentile(ctr, 0.9) * 1e3, (Percentile(ctr, 0.5) - Percentile(bare, 0.5)) * 1e3);

  // mltrain bare vs in its image, alternating, same arguments; the best run of each.
  const std::vector<std::string> args = {"--epochs", "1", "--threads", "1", "--train-limit", "20000", "--test-limit", "1000"};
  double best_bare = 0, best_ctr = 0;
  for (int i = 0; i < mltrain_runs; ++i) {
    ExitReport e;
    std::vector<std::string> a = {mltrain};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--metrics-out", out + "/bare.json"});
    runner.Run({job++, 1, 0}, Request(out, a), &e);
    if (e.exit_code != 0) throw std::runtime_error("bare mltrain exited " + std::to_string(e.exit_code) + ": " + e.error);
    best_bare = std::max(best_bare, SamplesPerSecond(out + "/bare.json"));
    a = {"/usr/local/bin/mltrain"};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), {"--metrics-out", out + "/ctr.json"});
    LaunchRequest r = Request(out, a);
    r.container = std::make_shared<ContainerLaunch>();
    r.container->image = mltrain_image;
    r.container->binds.push_back({out, out, false, true});
    r.container->binds.push_back({"/usr/share/datasets/fashion-mnist", "/usr/share/datasets/fashion-mnist", true, true});
    if (std::filesystem::exists("/usr/local/cuda")) r.container->binds.push_back({"/usr/local/cuda", "/usr/local/cuda", true, true});
    runner.Run({job++, 1, 0}, std::move(r), &e);
    if (e.exit_code != 0) throw std::runtime_error("mltrain in its image exited " + std::to_string(e.exit_code) + ": " + e.error);
    best_ctr = std::max(best_ctr, SamplesPerSecond(out + "/ctr.json"));
  }
  std::printf("mltrain samples/s (1 thread, 20,000 samples, best of %d): bare %.0f, in its image %.0f, ratio %.3f\n",
              mltrain_runs, best_bare, best_ctr, best_bare > 0 ? best_ctr / best_bare : 0);
  return 0;
}
