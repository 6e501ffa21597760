// Benchmarks of one full scheduling cycle (priority + gang placement + backfill) on synthetic
// GPU clusters, memory per pending job, and a pool replay like the simulator's SWF runs.
// Usage: core_cycle_bench [--quick]   (--quick: the small sizes only)
//        core_cycle_bench --cycle NODES PENDING none|easy|conservative [DEPTH]   (one size)
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "schedd/core/types.h"

using namespace mlsched::core;
using Clock = std::chrono::steady_clock;

namespace {

// `nodes` nodes of 8 GPUs in NVLink domains of 16 nodes; half the GPUs busy with running jobs.
// `workflows`: about 20% of the pending jobs are elements of 100-element arrays with %10, and 10%
// depend (afterok) on an earlier pending job, so the cycle also evaluates dependencies and throttles.
ClusterState MakeCluster(int nodes, int pending, std::mt19937_64& rng, bool workflows = false) {
  ClusterState s;
  s.nodes.reserve(nodes);
  for (int i = 0; i < nodes; ++i) {
    Node n;
    n.name = "gpu-" + std::to_string(i);
    n.pool = i % 4 == 0 ? Pool::kSpot : Pool::kOnDemand;
    n.region = "r1";
    n.zone = "z" + std::to_string(i / 256);
    n.domain = "nvl-" + std::to_string(i / 16);
    n.capacity = {96000, int64_t{1024} << 30, {{"h100", 8}}};
    s.nodes.push_back(n);
  }
  JobId id = 1;
  // Running: one 4-GPU task on every node (GPUs 0-3), ends spread over the next 8 hours.
  for (int i = 0; i < nodes; ++i) {
    Job j;
    j.id = id++;
    j.state = JobState::kRunning;
    j.spec.per_task = {8000, int64_t{64} << 30, {{"", 4}}};
    j.spec.time_limit = 600 + static_cast<Duration>(rng() % (8 * 3600));
    j.spec.account = "team" + std::to_string(i % 3);
    j.spec.user = "u" + std::to_string(i % 40);
    j.start_time = 0;
    TaskPlacement t;
    t.node = s.nodes[i].name;
    t.gpu_indices = {0, 1, 2, 3};
    t.resources = {8000, int64_t{64} << 30, {{"h100", 4}}};
    j.allocation = Allocation{{t}};
    s.jobs.push_back(std::move(j));
  }
  // Pending: realistic gang mix: mostly 1-8 GPUs, some 2-16 node gangs.
  for (int k = 0; k < pending; ++k) {
    Job j;
    j.id = id++;
    j.submit_time = static_cast<Timestamp>(k);
    int r = static_cast<int>(rng() % 100);
    int tasks = r < 60 ? 1 : r < 85 ? 2 : r < 95 ? 4 : r < 99 ? 8 : 16;
    int64_t gpus = tasks == 1 ? int64_t{1} << (rng() % 4) : 8;
    j.spec.ntasks = tasks;
    j.spec.per_task = {gpus * 8000, gpus * (int64_t{64} << 30), {{"", gpus}}};
    j.spec.time_limit = 300 + static_cast<Duration>(rng() % (12 * 3600));
    if (tasks >= 8 && rng() % 2) j.spec.topology = Topology::kSameZone;
    j.spec.account = "team" + std::to_string(rng() % 3);
    j.spec.user = "u" + std::to_string(rng() % 40);
    if (workflows && k >= 100) {
      const int kind = static_cast<int>(rng() % 10);
      if (kind < 2) {
        const JobId array_id = j.id - static_cast<JobId>(k % 100);
        j.spec.array = ArrayIndex{array_id, k % 100, 10, 100};
      } else if (kind == 2) {
        j.spec.dependencies.push_back({DependencyType::kAfterOk, {j.id - 1 - static_cast<JobId>(rng() % 100)}});
      }
    }
    s.jobs.push_back(std::move(j));
  }
  return s;
}

bool g_priced = false;  // --priced: pools priced as in policies/default.toml (cost-aware placement on)

PolicySet Policy(BackfillMode mode, int depth) {
  PolicySet p;
  if (g_priced) {
    p.placement.pricing["on-demand"] = PoolPricing{0.048, {{"h100", 4.10}}};
    p.placement.pricing["spot"] = PoolPricing{0.015, {{"h100", 1.60}}};
    p.placement.eviction_rate_per_hour["spot"] = 0.05;
  }
  p.queue_order = QueueOrder::kMultifactor;
  p.weights = {1000, 10000, 1000, 0, 0, 7 * 24 * 3600, false};
  p.backfill.mode = mode;
  p.backfill.depth = depth;
  for (int t = 0; t < 3; ++t) {
    AccountPolicy a;
    a.name = "team" + std::to_string(t);
    a.shares = t + 1;
    p.accounts.push_back(a);
  }
  return p;
}

void BenchCycle(int nodes, int pending, BackfillMode mode, int depth, int reps, bool workflows = false) {
  std::mt19937_64 rng(42);
  ClusterState s = MakeCluster(nodes, pending, rng, workflows);
  for (int u = 0; u < 40; ++u) s.usage["team" + std::to_string(u % 3) + "/u" + std::to_string(u)] = 1e6 * (u % 7);
  PolicySet p = Policy(mode, depth);
  double best = 1e30, total = 0;
  size_t starts = 0, planned = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    CyclePlan plan = SchedulingCycle::Run(s, p, 3600);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    best = std::min(best, ms);
    total += ms;
    starts = plan.starts.size();
    planned = std::count_if(plan.pending.begin(), plan.pending.end(),
                            [](const PendingUpdate& u) { return u.expected_start.has_value(); });
  }
  std::printf("cycle %6d nodes x %7d pending, %-12s depth %4d%s%s: best %9.1f ms, mean %9.1f ms "
              "(%zu starts, %zu planned starts)\n",
              nodes, pending, BackfillModeName(mode), depth, workflows ? " +arrays/deps" : "",
              g_priced ? " +priced pools" : "", best,
              total / reps, starts, planned);
}

void BenchMemory(int pending) {
  std::mt19937_64 rng(7);
  struct mallinfo2 before = mallinfo2();
  ClusterState s = MakeCluster(0, pending, rng);
  struct mallinfo2 after = mallinfo2();
  double per_job = double((after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd)) / pending;
  std::printf("memory: %.0f bytes per pending job (Job in ClusterState, heap included)\n", per_job);
}

// A pool of `procs` cores (the SWF model), Poisson arrivals, jobs run to their limit x U(0.1,1):
// every arrival and end runs one cycle, as the simulator does.
void BenchPoolReplay(int njobs, BackfillMode mode) {
  std::mt19937_64 rng(11);
  ClusterState s;
  Node pool;
  pool.name = "pool";
  pool.capacity = {128000, int64_t{128} << 30, {}};
  s.nodes.push_back(pool);
  struct Spec { Timestamp submit; Duration limit, run; int64_t procs; };
  std::vector<Spec> specs;
  Timestamp t = 0;
  for (int k = 0; k < njobs; ++k) {
    t += static_cast<Timestamp>(rng() % 5000);  // offered load about 0.9
    Duration limit = 60 + static_cast<Duration>(rng() % 36000);
    specs.push_back({t, limit, std::max<Duration>(1, limit * static_cast<Duration>(10 + rng() % 91) / 100),
                     int64_t{1} << (rng() % 8)});
  }
  std::vector<Duration> run(njobs + 1);
  size_t next = 0, cycles = 0, done = 0;
  Timestamp now = 0;
  PolicySet p;
  p.backfill.mode = mode;
  auto t0 = Clock::now();
  while (done < specs.size()) {
    std::erase_if(s.jobs, [&](const Job& j) {
      bool end = j.state == JobState::kRunning && j.start_time + run[j.id] <= now;
      done += end;
      return end;
    });
    while (next < specs.size() && specs[next].submit <= now) {
      Job j;
      j.id = static_cast<JobId>(next + 1);
      j.submit_time = specs[next].submit;
      j.spec.per_task.cpu_millis = specs[next].procs * 1000;
      j.spec.time_limit = specs[next].limit;
      run[j.id] = specs[next].run;
      s.jobs.push_back(std::move(j));
      ++next;
    }
    CyclePlan plan = SchedulingCycle::Run(s, p, now);
    ++cycles;
    for (const StartDecision& d : plan.starts)
      for (Job& j : s.jobs)
        if (j.id == d.job) { j.state = JobState::kRunning; j.start_time = now; j.allocation = d.allocation; }
    Timestamp nt = std::numeric_limits<Timestamp>::max();
    for (const Job& j : s.jobs) if (j.state == JobState::kRunning) nt = std::min(nt, j.start_time + run[j.id]);
    if (next < specs.size()) nt = std::min(nt, specs[next].submit);
    if (nt == std::numeric_limits<Timestamp>::max()) break;
    now = nt;
  }
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("pool replay: %d jobs, %-12s %zu cycles in %.2f s (%.1f us per cycle)\n", njobs,
              BackfillModeName(mode), cycles, sec, sec * 1e6 / double(cycles));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 5 && std::strcmp(argv[1], "--cycle") == 0) {
    auto mode = ParseBackfillMode(argv[4]);
    if (!mode) return 2;
    bool workflows = false;
    for (int a = 6; a < argc; ++a) {
      workflows |= std::strcmp(argv[a], "--workflows") == 0;
      g_priced |= std::strcmp(argv[a], "--priced") == 0;
    }
    BenchCycle(std::atoi(argv[2]), std::atoi(argv[3]), *mode, argc > 5 ? std::atoi(argv[5]) : 0, 3, workflows);
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  BenchMemory(10000);
  BenchCycle(1000, 10000, BackfillMode::kNone, 0, 5);
  BenchCycle(1000, 10000, BackfillMode::kEasy, 0, 5);
  BenchCycle(1000, 10000, BackfillMode::kConservative, 100, 3);
  BenchCycle(1000, 10000, BackfillMode::kEasy, 0, 5, true);
  BenchPoolReplay(quick ? 5000 : 28000, BackfillMode::kEasy);
  BenchPoolReplay(quick ? 5000 : 28000, BackfillMode::kConservative);
  if (!quick) {
    BenchCycle(10000, 100000, BackfillMode::kEasy, 0, 2);
    BenchCycle(10000, 100000, BackfillMode::kConservative, 100, 1);
  }
  return 0;
}
