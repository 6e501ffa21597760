#include "tests/core/support.h"

#include "schedd/core/dependency.h"
#include "schedd/core/limits.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace mlsched::core::testing {

std::vector<std::string> ExpandHostList(const std::string& list) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    // Split on commas outside brackets.
    size_t end = pos, depth = 0;
    while (end < list.size() && (list[end] != ',' || depth > 0)) {
      if (list[end] == '[') ++depth;
      if (list[end] == ']') --depth;
      ++end;
    }
    std::string item = list.substr(pos, end - pos);
    size_t open = item.find('[');
    if (open == std::string::npos) {
      if (!item.empty()) out.push_back(item);
    } else {
      size_t close = item.find(']', open);
      std::string range = item.substr(open + 1, close - open - 1);
      size_t dash = range.find('-');
      std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
      for (int64_t i = std::stoll(lo); i <= std::stoll(hi); ++i) {
        std::string num = std::to_string(i);
        if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');
        out.push_back(item.substr(0, open) + num + item.substr(close + 1));
      }
    }
    pos = end + 1;
  }
  return out;
}

ClusterBuilder::ClusterBuilder() {
  defaults_.capacity.cpu_millis = 64000;
  defaults_.capacity.memory_bytes = int64_t{512} << 30;
  defaults_.region = "r1";
  defaults_.zone = "z1";
  defaults_.domain = "d1";
}

ClusterBuilder& ClusterBuilder::Pool(const std::string& pool) {
  auto p = ParsePool(pool);
  if (!p) throw std::invalid_argument("unknown pool " + pool);
  defaults_.pool = *p;
  return *this;
}
ClusterBuilder& ClusterBuilder::Region(const std::string& r) { defaults_.region = r; return *this; }
ClusterBuilder& ClusterBuilder::Zone(const std::string& z) { defaults_.zone = z; return *this; }
ClusterBuilder& ClusterBuilder::Domain(const std::string& d) { defaults_.domain = d; return *this; }
ClusterBuilder& ClusterBuilder::Nodes(const std::string& host_list) {
  group_begin_ = nodes_.size();
  for (const std::string& name : ExpandHostList(host_list)) {
    Node n = defaults_;
    n.name = name;
    nodes_.push_back(n);
  }
  return *this;
}
ClusterBuilder& ClusterBuilder::Gpus(const std::string& type, int64_t count) {
  return ForGroup([&](Node& n) { n.capacity.gpus = {{type, count}}; });
}
ClusterBuilder& ClusterBuilder::Cpus(int64_t cores) { return ForGroup([&](Node& n) { n.capacity.cpu_millis = cores * 1000; }); }
ClusterBuilder& ClusterBuilder::MemoryGiB(int64_t gib) { return ForGroup([&](Node& n) { n.capacity.memory_bytes = gib << 30; }); }
ClusterBuilder& ClusterBuilder::Features(std::vector<std::string> f) { return ForGroup([&](Node& n) { n.features = f; }); }
ClusterBuilder& ClusterBuilder::Health(NodeHealth h) { return ForGroup([&](Node& n) { n.health = h; }); }

std::vector<Node> ClusterBuilder::Build() const { return nodes_; }

JobBuilder::JobBuilder(JobId id) {
  job_.id = id;
  job_.submit_time = id;  // FIFO order follows ids unless Submit() says otherwise
  job_.spec.name = "job" + std::to_string(id);
  job_.spec.user = "alice";
  job_.spec.account = "research";
  job_.spec.per_task.cpu_millis = 1000;
}
JobBuilder& JobBuilder::Tasks(int32_t n) { job_.spec.ntasks = n; return *this; }
JobBuilder& JobBuilder::Elastic(int32_t min_tasks, int32_t max_tasks, int32_t step) {
  job_.spec.ntasks = max_tasks;
  job_.spec.elastic = TaskRange{min_tasks, step};
  return *this;
}
JobBuilder& JobBuilder::GpusPerTask(int64_t n, const std::string& type) {
  job_.spec.per_task.gpus = {{type, n}};
  return *this;
}
JobBuilder& JobBuilder::GpuTypes(std::vector<std::string> t) { job_.spec.gpu_types = std::move(t); return *this; }
JobBuilder& JobBuilder::CpusPerTask(int64_t c) { job_.spec.per_task.cpu_millis = c * 1000; return *this; }
JobBuilder& JobBuilder::CpuMillisPerTask(int64_t m) { job_.spec.per_task.cpu_millis = m; return *this; }
JobBuilder& JobBuilder::MemoryGiBPerTask(int64_t g) { job_.spec.per_task.memory_bytes = g << 30; return *this; }
JobBuilder& JobBuilder::TimeLimit(std::chrono::seconds l) { job_.spec.time_limit = l.count(); return *this; }
JobBuilder& JobBuilder::Submit(Timestamp t) { job_.submit_time = t; return *this; }
JobBuilder& JobBuilder::Topo(Topology t) { job_.spec.topology = t; return *this; }
JobBuilder& JobBuilder::Partition(const std::string& p) { job_.spec.partition = p; return *this; }
JobBuilder& JobBuilder::Account(const std::string& a) { job_.spec.account = a; return *this; }
JobBuilder& JobBuilder::User(const std::string& u) { job_.spec.user = u; return *this; }
JobBuilder& JobBuilder::Qos(const std::string& q) { job_.spec.qos = q; return *this; }
JobBuilder& JobBuilder::Nice(int32_t n) { job_.spec.nice = n; return *this; }
JobBuilder& JobBuilder::Hold() { job_.spec.hold = true; return *this; }
JobBuilder& JobBuilder::Features(std::vector<std::string> f) { job_.spec.features = std::move(f); return *this; }
JobBuilder& JobBuilder::Name(const std::string& name) { job_.spec.name = name; return *this; }
JobBuilder& JobBuilder::DependsOn(DependencyType type, std::vector<JobId> jobs) {
  job_.spec.dependencies.push_back({type, std::move(jobs)});
  return *this;
}
JobBuilder& JobBuilder::DependsOnAny() { job_.spec.dependency_any = true; return *this; }
JobBuilder& JobBuilder::Singleton() { return DependsOn(DependencyType::kSingleton, {}); }
JobBuilder& JobBuilder::ArrayElement(JobId array_id, int32_t task, int32_t max_running) {
  job_.spec.array = ArrayIndex{array_id, task, max_running, 0};
  return *this;
}
JobBuilder& JobBuilder::Running(Timestamp start, Allocation allocation) {
  job_.state = JobState::kRunning;
  job_.start_time = start;
  job_.allocation = std::move(allocation);
  return *this;
}

TaskPlacement Task(int32_t rank, const std::string& node, std::vector<int32_t> gpu_indices,
                   const std::string& gpu_type, int64_t cpu_millis) {
  TaskPlacement t;
  t.rank = rank;
  t.node = node;
  t.resources.cpu_millis = cpu_millis;
  if (!gpu_indices.empty()) t.resources.gpus[gpu_type] = static_cast<int64_t>(gpu_indices.size());
  t.gpu_indices = std::move(gpu_indices);
  return t;
}

namespace {

void CheckGang(const Job& job, const PolicySet& policy, const Allocation& alloc,
               const std::map<std::string, const Node*>& nodes, std::vector<std::string>& out) {
  const std::string who = "job " + std::to_string(job.id);
  const std::vector<int32_t> sizes = GangSizes(job.spec);  // an elastic gang: any of its sizes
  const int32_t placed = static_cast<int32_t>(alloc.tasks.size());
  const bool size_ok = std::find(sizes.begin(), sizes.end(), placed) != sizes.end();
  const int32_t want = size_ok ? placed : job.spec.ntasks;  // ranks 0..want-1 must be there
  if (!size_ok)
    out.push_back(who + ": " + std::to_string(alloc.tasks.size()) + " tasks placed of " +
                  std::to_string(job.spec.ntasks));
  std::set<int32_t> ranks;
  std::set<std::string> gpu_types;
  const PartitionPolicy* part = FindPartition(policy, job.spec.partition);
  for (const TaskPlacement& t : alloc.tasks) {
    ranks.insert(t.rank);
    auto it = nodes.find(t.node);
    if (it == nodes.end()) { out.push_back(who + ": unknown node " + t.node); continue; }
    const Node& n = *it->second;
    if (n.health != NodeHealth::kUp) out.push_back(who + ": started on node not up " + n.name);
    if (part && !part->pools.empty() &&
        std::find(part->pools.begin(), part->pools.end(), PoolName(n.pool)) == part->pools.end())
      out.push_back(who + ": node " + n.name + " outside partition pools");
    int64_t want_gpus = job.spec.per_task.GpuCount();
    // A CPU fallback tier (fallback.h) runs the job without GPUs.
    bool cpu_tier = std::any_of(job.spec.fallback.begin(), job.spec.fallback.end(),
                                [](const FallbackTier& f) { return f.accelerator == "cpu"; });
    if (cpu_tier && t.resources.GpuCount() == 0 && t.gpu_indices.empty()) want_gpus = 0;
    if (t.resources.GpuCount() != want_gpus || static_cast<int64_t>(t.gpu_indices.size()) != want_gpus)
      out.push_back(who + ": task " + std::to_string(t.rank) + " has wrong GPU count");
    if (t.resources.cpu_millis != job.spec.per_task.cpu_millis)
      out.push_back(who + ": task " + std::to_string(t.rank) + " has wrong CPU");
    for (const auto& [type, c] : t.resources.gpus) if (c > 0) gpu_types.insert(type);
  }
  for (int32_t r = 0; r < want; ++r)
    if (!ranks.count(r)) out.push_back(who + ": rank " + std::to_string(r) + " missing");
  if (gpu_types.size() > 1) out.push_back(who + ": gang spans GPU types");
}

// Every start keeps the account (inherited), QoS and partition limits: recomputed independently
// of LimitTracker from the running jobs plus the starts before it.
// Started jobs' dependencies hold; singletons and array "%N" limits hold after the starts.
void CheckDependencies(const ClusterState& state, const CyclePlan& plan, const std::map<JobId, const Job*>& jobs,
                       std::vector<std::string>& out) {
  const JobStateIndex index(state);
  std::map<std::pair<std::string, std::string>, int> singletons;
  std::map<JobId, int> array_running;
  for (const Job& j : state.jobs)
    if (j.state == JobState::kRunning && j.id > 0) {
      singletons[{j.spec.user, j.spec.name}] += 1;
      if (j.spec.array.job_id) array_running[j.spec.array.job_id] += 1;
    }
  for (const StartDecision& s : plan.starts) {
    auto it = jobs.find(s.job);
    if (it == jobs.end()) continue;
    const JobSpec& spec = it->second->spec;
    if (EvaluateDependencies(spec, index).kind != DependencyStatus::Kind::kSatisfied)
      out.push_back("job " + std::to_string(s.job) + " started before its dependencies hold");
    if (IsSingleton(spec) && ++singletons[{spec.user, spec.name}] > 1)
      out.push_back("singleton job " + std::to_string(s.job) + " started beside another '" + spec.name + "'");
    else if (!IsSingleton(spec))
      singletons[{spec.user, spec.name}] += 1;
    if (spec.array.job_id && ++array_running[spec.array.job_id] > spec.array.max_running &&
        spec.array.max_running > 0)
      out.push_back("array " + std::to_string(spec.array.job_id) + " runs more than %" +
                    std::to_string(spec.array.max_running));
  }
}

void CheckLimits(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                 const std::map<JobId, const Job*>& jobs, std::vector<std::string>& out) {
  std::map<std::string, std::pair<int64_t, int64_t>> account;        // gpus, jobs
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> qos_user;
  auto add = [&](const Job& j) {
    const int64_t gpus = j.spec.per_task.GpuCount() * j.spec.ntasks;
    for (const AccountPolicy* a : AccountChain(policy, j.spec.account)) {
      account[a->name].first += gpus;
      account[a->name].second += 1;
    }
    if (const QosPolicy* q = FindQos(policy, j.spec.qos)) {
      qos_user[{q->name, j.spec.user}].first += gpus;
      qos_user[{q->name, j.spec.user}].second += 1;
    }
  };
  for (const Job& j : state.jobs)
    if (j.state == JobState::kRunning || j.state == JobState::kCompleting) add(j);
  for (const StartDecision& s : plan.starts) {
    auto it = jobs.find(s.job);
    if (it == jobs.end()) continue;
    const Job& j = *it->second;
    add(j);
    const std::string who = "job " + std::to_string(j.id) + ": ";
    for (const AccountPolicy* a : AccountChain(policy, j.spec.account)) {
      if (a->max_gpus > 0 && account[a->name].first > a->max_gpus) out.push_back(who + "account " + a->name + " over max_gpus");
      if (a->max_running_jobs > 0 && account[a->name].second > a->max_running_jobs)
        out.push_back(who + "account " + a->name + " over max_running_jobs");
    }
    if (const QosPolicy* q = FindQos(policy, j.spec.qos)) {
      auto t = qos_user[{q->name, j.spec.user}];
      if (q->max_gpus_per_user > 0 && t.first > q->max_gpus_per_user) out.push_back(who + "QoS max_gpus_per_user");
      if (q->max_running_jobs_per_user > 0 && t.second > q->max_running_jobs_per_user)
        out.push_back(who + "QoS max_running_jobs_per_user");
      if (q->max_wall > 0 && j.spec.time_limit > q->max_wall) out.push_back(who + "QoS max_wall");
    }
  }
}

}  // namespace

std::vector<std::string> CheckInvariants(const ClusterState& state, const PolicySet& policy,
                                         const CyclePlan& plan) {
  std::vector<std::string> out;
  std::map<std::string, const Node*> nodes;
  for (const Node& n : state.nodes) nodes[n.name] = &n;
  std::map<JobId, const Job*> jobs;
  for (const Job& j : state.jobs) jobs[j.id] = &j;
  std::map<std::string, ResourceVector> used;
  std::map<std::string, std::set<int32_t>> devices;
  auto account = [&](JobId id, const Allocation& a) {
    for (const TaskPlacement& t : a.tasks) {
      used[t.node] += t.resources;
      for (int32_t d : t.gpu_indices) {
        if (!devices[t.node].insert(d).second)
          out.push_back("device " + std::to_string(d) + " on " + t.node + " held twice (job " +
                        std::to_string(id) + ")");
        auto it = nodes.find(t.node);
        if (it != nodes.end() && (d < 0 || d >= it->second->capacity.GpuCount()))
          out.push_back("device index " + std::to_string(d) + " out of range on " + t.node);
      }
    }
  };
  for (const Job& j : state.jobs)
    if (j.state != JobState::kPending && !IsFinal(j.state) && j.allocation) account(j.id, *j.allocation);
  std::set<JobId> decided;
  for (const StartDecision& s : plan.starts) {
    auto it = jobs.find(s.job);
    if (it == jobs.end() || it->second->state != JobState::kPending) {
      out.push_back("started job " + std::to_string(s.job) + " was not pending");
      continue;
    }
    if (!decided.insert(s.job).second) out.push_back("job " + std::to_string(s.job) + " decided twice");
    CheckGang(*it->second, policy, s.allocation, nodes, out);
    account(s.job, s.allocation);
  }
  for (const auto& [name, u] : used) {
    auto it = nodes.find(name);
    if (it != nodes.end() && !u.FitsIn(it->second->capacity)) out.push_back("node " + name + " over-allocated");
  }
  CheckLimits(state, policy, plan, jobs, out);
  CheckDependencies(state, plan, jobs, out);
  for (const PendingUpdate& p : plan.pending)
    if (!decided.insert(p.job).second) out.push_back("job " + std::to_string(p.job) + " decided twice");
  for (const Job& j : state.jobs)
    if (j.state == JobState::kPending && !decided.count(j.id))
      out.push_back("pending job " + std::to_string(j.id) + " has no decision");
  return out;
}

void ApplyPlan(ClusterState& state, const CyclePlan& plan, Timestamp now) {
  std::map<JobId, Job*> jobs;
  for (Job& j : state.jobs) jobs[j.id] = &j;
  for (const StartDecision& s : plan.starts) {
    Job& j = *jobs.at(s.job);
    j.state = JobState::kRunning;
    j.start_time = now;
    j.reason = PendingReason::kNone;
    j.allocation = s.allocation;
  }
  for (const PendingUpdate& p : plan.pending) {
    jobs.at(p.job)->reason = p.reason;
    jobs.at(p.job)->expected_start = p.expected_start;
  }
}

CyclePlan RunChecked(const ClusterState& state, const PolicySet& policy, Timestamp now) {
  CyclePlan plan = SchedulingCycle::Run(state, policy, now);
  std::vector<std::string> violations = CheckInvariants(state, policy, plan);
  INFO("invariant violations: " << violations.size());
  for (const std::string& v : violations) UNSCOPED_INFO(v);
  REQUIRE(violations.empty());
  return plan;
}

std::vector<JobId> StartedIds(const CyclePlan& plan) {
  std::vector<JobId> ids;
  for (const StartDecision& s : plan.starts) ids.push_back(s.job);
  return ids;
}

PendingUpdate PendingOf(const CyclePlan& plan, JobId job) {
  for (const PendingUpdate& p : plan.pending)
    if (p.job == job) return p;
  FAIL("job " << job << " has no pending update");
  return {};
}

}  // namespace mlsched::core::testing

namespace mlsched::core::testing {

void Replay::Run(const PolicySet& policy,
                 const std::function<void(const ClusterState&, const CyclePlan&, Timestamp)>& on_cycle,
                 int max_cycles) {
  std::sort(arrivals.begin(), arrivals.end(),
            [](const Job& a, const Job& b) { return a.submit_time < b.submit_time; });
  size_t next_arrival = 0;
  Timestamp now = arrivals.empty() ? 0 : arrivals.front().submit_time;
  for (int cycle = 0; cycle < max_cycles; ++cycle) {
    // Ends first (at their time), then arrivals, then one cycle.
    std::erase_if(state.jobs, [&](const Job& j) {
      if (j.state != JobState::kRunning) return false;
      auto rt = run_time.find(j.id);
      Duration d = rt == run_time.end() ? j.spec.time_limit : rt->second;
      if (j.start_time + d > now) return false;
      auto out = outcome.find(j.id);
      state.omitted[j.id] = out == outcome.end() ? JobState::kCompleted : out->second;
      return true;
    });
    while (next_arrival < arrivals.size() && arrivals[next_arrival].submit_time <= now)
      state.jobs.push_back(arrivals[next_arrival++]);
    CyclePlan plan = RunChecked(state, policy, now);
    for (const StartDecision& s : plan.starts) started[s.job] = now;
    ApplyPlan(state, plan, now);
    if (on_cycle) on_cycle(state, plan, now);
    // Next event: the earliest end or arrival.
    std::optional<Timestamp> next;
    auto consider = [&](Timestamp t) { if (t > now && (!next || t < *next)) next = t; };
    for (const Job& j : state.jobs)
      if (j.state == JobState::kRunning) {
        auto rt = run_time.find(j.id);
        consider(j.start_time + (rt == run_time.end() ? j.spec.time_limit : rt->second));
      }
    if (next_arrival < arrivals.size()) consider(arrivals[next_arrival].submit_time);
    if (!next) return;
    now = *next;
  }
}

}  // namespace mlsched::core::testing
