// Replays an SWF trace through SchedulingCycle::Run on one pool of processors (pyss semantics:
// size = requested processors, or allocated when unknown; run time clipped to the requested time;
// FCFS order; a scheduling pass after every event time) and prints mean bounded slowdown
// (tau = 10 s), mean wait, utilization and the replay's wall time. Validates the core's FIFO,
// EASY and conservative backfill against the published pyss figures (traces/README.md).
// Usage: core_swf_replay TRACE.swf PROCS none|easy|conservative [--exact] [--sjf] [--keep-plans]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "schedd/core/types.h"

using namespace mlsched::core;

namespace {

struct SwfJob {
  JobId id;
  Timestamp submit;
  Duration run, limit;
  int64_t procs;
};

std::vector<SwfJob> ReadSwf(const char* path, int64_t max_procs, bool exact) {
  std::ifstream in(path);
  std::vector<SwfJob> jobs;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == ';') continue;
    std::istringstream f(line);
    double v[18];
    int n = 0;
    while (n < 18 && f >> v[n]) ++n;
    if (n < 18) continue;
    int64_t procs = v[7] > 0 ? static_cast<int64_t>(v[7]) : static_cast<int64_t>(v[4]);
    Duration limit = static_cast<Duration>(v[8]);
    Duration run = static_cast<Duration>(v[3]);
    if (procs <= 0 || procs > max_procs || run < 0 || limit <= 0) continue;
    run = std::min(run, limit);
    if (exact) limit = std::max<Duration>(run, 1);
    jobs.push_back({static_cast<JobId>(jobs.size() + 1), static_cast<Timestamp>(v[1]), run, limit, procs});
  }
  std::stable_sort(jobs.begin(), jobs.end(), [](const SwfJob& a, const SwfJob& b) { return a.submit < b.submit; });
  return jobs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TRACE.swf PROCS none|easy|conservative [--exact] [--sjf]\n", argv[0]);
    return 2;
  }
  const int64_t procs = std::stoll(argv[2]);
  bool exact = false, sjf = false, keep = false;
  for (int i = 4; i < argc; ++i) {
    keep = keep || std::strcmp(argv[i], "--keep-plans") == 0;
    exact = exact || std::strcmp(argv[i], "--exact") == 0;
    sjf = sjf || std::strcmp(argv[i], "--sjf") == 0;
  }
  PolicySet policy;
  auto mode = ParseBackfillMode(argv[3]);
  if (!mode) { std::fprintf(stderr, "unknown mode %s\n", argv[3]); return 2; }
  policy.backfill.mode = *mode;
  if (sjf) policy.backfill.order = BackfillOrder::kShortestFirst;
  policy.backfill.keep_plans = keep;
  policy.partitions[0].max_time_limit = int64_t{1} << 40;
  std::vector<SwfJob> trace = ReadSwf(argv[1], procs, exact);
  ClusterState state;
  Node pool;
  pool.name = "pool";
  pool.capacity.cpu_millis = procs * 1000;
  state.nodes.push_back(pool);
  std::unordered_map<JobId, const SwfJob*> by_id;
  for (const SwfJob& j : trace) by_id[j.id] = &j;
  std::vector<Timestamp> start(trace.size() + 1, -1);
  size_t next = 0, cycles = 0;
  Timestamp now = trace.empty() ? 0 : trace.front().submit;
  auto t0 = std::chrono::steady_clock::now();
  while (true) {
    std::erase_if(state.jobs, [&](const Job& j) {
      return j.state == JobState::kRunning && j.start_time + by_id[j.id]->run <= now;
    });
    while (next < trace.size() && trace[next].submit <= now) {
      Job j;
      j.id = trace[next].id;
      j.submit_time = trace[next].submit;
      j.spec.per_task.cpu_millis = trace[next].procs * 1000;
      j.spec.time_limit = trace[next].limit;
      state.jobs.push_back(std::move(j));
      ++next;
    }
    CyclePlan plan = SchedulingCycle::Run(state, policy, now);
    ++cycles;
    std::unordered_map<JobId, const StartDecision*> starts;
    for (const StartDecision& d : plan.starts) starts[d.job] = &d;
    std::unordered_map<JobId, std::optional<Timestamp>> planned;
    for (const PendingUpdate& u : plan.pending) planned[u.job] = u.expected_start;
    Timestamp nt = next < trace.size() ? trace[next].submit : INT64_MAX;
    for (Job& j : state.jobs) {
      if (auto it = starts.find(j.id); it != starts.end()) {
        j.state = JobState::kRunning;
        j.start_time = now;
        j.allocation = it->second->allocation;
        start[j.id] = now;
      }
      if (j.state == JobState::kPending) j.expected_start = planned[j.id];
      if (j.state == JobState::kRunning) nt = std::min(nt, j.start_time + by_id[j.id]->run);
    }
    if (nt == INT64_MAX) break;
    now = std::max(nt, now + (nt == now ? 1 : 0));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double bsld = 0, wait = 0, work = 0;
  Timestamp first = trace.front().submit, last = first;
  for (const SwfJob& j : trace) {
    double w = double(start[j.id] - j.submit);
    wait += w;
    bsld += std::max(1.0, (w + double(j.run)) / std::max<double>(double(j.run), 10.0));
    work += double(j.run) * double(j.procs);
    last = std::max(last, start[j.id] + j.run);
  }
  const double n = double(trace.size());
  std::printf("%s %s%s%s%s: %zu jobs, mean bounded slowdown %.2f, mean wait %.0f s, utilization %.4f, "
              "%zu cycles in %.2f s\n",
              argv[1], argv[3], exact ? " exact" : "", sjf ? " sjf" : "", keep ? " keep-plans" : "", trace.size(), bsld / n, wait / n,
              work / (double(procs) * double(last - first)), cycles, secs);
  return 0;
}
