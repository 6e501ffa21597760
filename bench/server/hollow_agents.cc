// hollow_agents: N hollow nodes in one process (Kubernetes' kubemark idea), each a real
// mlsched::agent::Agent - the protocol code of agentd, with its outbox, acks, heartbeats,
// prepare/commit/abort and fencing - whose tasks run on a HollowDriver (no process: a task "runs"
// for its `sleep N` or --task-seconds and exits 0). For scale benchmarks and the scale smoke test
// (bench/server/scale_bench.sh).
//   hollow_agents --server ADDR --nodes N --work-dir DIR [--prefix hollow-] [--cpus 32] [--mem 256G]
//                 [--gpus TYPE:N] [--pool on-demand] [--domains 16] [--task-seconds 1] [--tls-dir DIR]
// On TCP each node presents DIR/nodes/NAME.pem (scripts/mlsched-certs.sh DIR node NAME). Prints
// "hollow: N/N registered in S s" once all have registered, then runs until SIGTERM or SIGINT.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <csignal>
#include <iostream>
#include <thread>

#include "agentd/agent.h"
#include "bench/server/hollow_driver.h"
#include "common/client.h"
#include "common/units.h"

using namespace mlsched;

namespace {

/// The most hollow nodes one process holds (each agent keeps 2 threads while connected).
constexpr int kMaxNodes = 20000;

std::string NodeName(const std::string& prefix, int i, int n) {
  std::string num = std::to_string(i);
  const size_t width = std::to_string(n).size();
  return prefix + std::string(width > num.size() ? width - num.size() : 0, '0') + num;
}

}  // namespace

int main(int argc, char** argv) {
  mlsched::DisableMutexDeadlockDetection();  // common/client.h
  CLI::App app{"hollow_agents: N hollow mlsched nodes (real agent protocol, no task processes)"};
  std::string server, work_dir, prefix = "hollow-", cpus = "32", mem = "256G", pool = "on-demand", tls_dir;
  std::vector<std::string> gpus;
  int nodes = 100, domains = 16;
  double task_seconds = 1;
  std::string log_level = "error";
  app.add_option("--server", server, "schedd address (unix:PATH or HOST:PORT,...)")->required();
  app.add_option("--nodes", nodes, "Hollow nodes")->check(CLI::Range(1, kMaxNodes));
  app.add_option("--work-dir", work_dir, "Directory of the nodes' work directories (outboxes)")->required();
  app.add_option("--prefix", prefix, "Node name prefix");
  app.add_option("--cpus", cpus, "CPUs per node");
  app.add_option("--mem", mem, "Memory per node");
  app.add_option("--gpus", gpus, "GPUs per node, TYPE:N");
  app.add_option("--pool", pool, "Pool of every node");
  app.add_option("--domains", domains, "Topology domains the nodes are spread over")->check(CLI::Range(1, 100000));
  app.add_option("--task-seconds", task_seconds, "How long a task runs unless its command is `sleep N`");
  app.add_option("--tls-dir", tls_dir, "On TCP: the cluster's TLS directory (ca.pem, nodes/NAME.pem|key)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  ServerList servers;
  if (std::string err = ResolveServerList(server, &servers); !err.empty()) {
    std::cerr << "hollow_agents: --server: " << err << "\n";
    return 2;
  }
  agent::AgentConfig base;
  base.servers = servers.addresses;
  base.cgroups = agent::CgroupMode::kOff;
  base.allow_root_jobs = true;  // the benchmark submits as whoever runs it
  base.read_task_progress = false;  // hollow tasks write no status file
  base.health.interval = std::chrono::seconds(0);  // no health thread per hollow node (pid_max)
  base.nvml_library = "none";
  base.node.pool = pool;
  base.node.address = "127.0.0.1";
  auto c = ParseCpus(cpus);
  auto m = ParseMemory(mem);
  if (!c || !m) {
    std::cerr << "hollow_agents: bad --cpus or --mem\n";
    return 2;
  }
  base.node.cpu_millis = *c.value;
  base.node.memory_bytes = *m.value;
  if (!gpus.empty()) {
    auto g = agent::ParseGpuFlag(gpus);
    if (!g) {
      std::cerr << "hollow_agents: " << g.error << "\n";
      return 2;
    }
    base.node.gpus = *g.value;
  }

  // One process holds what NODES machines would: each agent's connection, outbox and job files,
  // and a socket per rendezvous port reserved for a prepared task. Raise the soft limit on open
  // files as far as the hard one allows (scale_bench.sh raises the hard one first, as root).
  if (struct rlimit rl {}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  bench::HollowClock clock;
  const auto run = std::chrono::milliseconds(static_cast<int64_t>(task_seconds * 1000));
  std::vector<std::unique_ptr<agent::Agent>> agents;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < nodes; ++i) {
      agent::AgentConfig cfg = base;
      cfg.node.name = NodeName(prefix, i + 1, nodes);
      cfg.node.domain = "d" + std::to_string(i % domains);
      cfg.work_dir = work_dir + "/" + cfg.node.name;
      if (!tls_dir.empty())
        cfg.tls = TlsFiles{tls_dir + "/ca.pem", tls_dir + "/nodes/" + cfg.node.name + ".pem",
                           tls_dir + "/nodes/" + cfg.node.name + ".key"};
      auto a = std::make_unique<agent::Agent>(cfg, [&](agent::TaskDriver::StartedFn s, agent::TaskDriver::ExitedFn e) {
        return std::make_unique<bench::HollowDriver>(std::move(s), std::move(e), clock, run);
      });
      a->Start();
      agents.push_back(std::move(a));
    }
  } catch (const std::exception& e) {
    std::cerr << "hollow_agents: " << e.what() << "\n";
    return 1;
  }
  // Report once every node has registered (or keep counting every 5 s).
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    auto last = std::chrono::steady_clock::now();
    while (!stop) {
      int up = 0;
      for (const auto& a : agents) up += a->Connected() ? 1 : 0;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (up == nodes) {
        std::cout << "hollow: " << up << "/" << nodes << " registered in " << s << " s" << std::endl;
        return;
      }
      if (std::chrono::steady_clock::now() - last > std::chrono::seconds(5)) {
        std::cout << "hollow: " << up << "/" << nodes << " registered after " << s << " s" << std::endl;
        last = std::chrono::steady_clock::now();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  int sig = 0;
  sigwait(&sigs, &sig);
  stop = true;
  watcher.join();
  // Stop the agents a few at a time in parallel (each one closes its stream).
  std::vector<std::thread> stoppers;
  const size_t per = (agents.size() + 7) / 8;
  for (size_t from = 0; from < agents.size(); from += per)
    stoppers.emplace_back([&, from] {
      for (size_t i = from; i < std::min(agents.size(), from + per); ++i) agents[i]->Shutdown();
    });
  for (auto& t : stoppers) t.join();
  return 0;
}
