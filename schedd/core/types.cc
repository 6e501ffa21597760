// Names, parsers and resource arithmetic for the core's value types.
#include "schedd/core/types.h"

#include "schedd/core/names.h"

#include <algorithm>
#include <array>
#include <utility>

namespace mlsched::core {

using names::NameOf;
using names::ParseName;

int64_t ResourceVector::GpuCount() const {
  if (gpus.size() == 1) return gpus.begin()->second;  // one type, the common case: no tree walk
  int64_t total = 0;
  for (const auto& [type, count] : gpus) total += count;
  return total;
}

bool ResourceVector::FitsIn(const ResourceVector& other) const {
  if (cpu_millis > other.cpu_millis || memory_bytes > other.memory_bytes) return false;
  for (const auto& [type, count] : gpus) {
    if (count <= 0) continue;
    auto it = other.gpus.find(type);
    if (it == other.gpus.end() || it->second < count) return false;
  }
  return true;
}

ResourceVector& ResourceVector::operator+=(const ResourceVector& o) {
  cpu_millis += o.cpu_millis;
  memory_bytes += o.memory_bytes;
  for (const auto& [type, count] : o.gpus) gpus[type] += count;
  return *this;
}

ResourceVector& ResourceVector::operator-=(const ResourceVector& o) {
  cpu_millis -= o.cpu_millis;
  memory_bytes -= o.memory_bytes;
  for (const auto& [type, count] : o.gpus) gpus[type] -= count;
  return *this;
}

namespace {
constexpr std::array<std::pair<Pool, const char*>, 3> kPools{{
    {Pool::kOnDemand, "on-demand"}, {Pool::kSpot, "spot"}, {Pool::kReserved, "reserved"}}};

constexpr std::array<std::pair<JobState, const char*>, 9> kJobStates{{
    {JobState::kPending, "PENDING"},
    {JobState::kRunning, "RUNNING"},
    {JobState::kCompleting, "COMPLETING"},
    {JobState::kCompleted, "COMPLETED"},
    {JobState::kFailed, "FAILED"},
    {JobState::kCancelled, "CANCELLED"},
    {JobState::kTimeout, "TIMEOUT"},
    {JobState::kPreempted, "PREEMPTED"},
    {JobState::kNodeFail, "NODE_FAIL"}}};

constexpr std::array<std::pair<PendingReason, const char*>, 16> kReasons{{
    {PendingReason::kNone, "None"},
    {PendingReason::kPriority, "Priority"},
    {PendingReason::kResources, "Resources"},
    {PendingReason::kJobHeldUser, "JobHeldUser"},
    {PendingReason::kJobHeldAdmin, "JobHeldAdmin"},
    {PendingReason::kDependency, "Dependency"},
    {PendingReason::kQosLimit, "QOSLimit"},
    {PendingReason::kAccountQuota, "AccountQuota"},
    {PendingReason::kPartitionLimit, "PartitionLimit"},
    {PendingReason::kPartitionDown, "PartitionDown"},
    {PendingReason::kBeginTime, "BeginTime"},
    {PendingReason::kWaitingForSpotBudget, "WaitingForSpotBudget"},
    {PendingReason::kLaunchFailedRequeue, "LaunchFailedRequeue"},
    {PendingReason::kPreempting, "Preempting"},
    {PendingReason::kDependencyNeverSatisfied, "DependencyNeverSatisfied"},
    {PendingReason::kJobArrayTaskLimit, "JobArrayTaskLimit"}}};

constexpr std::array<std::pair<PreemptMode, const char*>, 2> kPreemptModes{{
    {PreemptMode::kRequeue, "requeue"},
    {PreemptMode::kCancel, "cancel"}}};

constexpr std::array<std::pair<Topology, const char*>, 5> kTopologies{{
    {Topology::kNone, "none"},
    {Topology::kSameDomain, "same-domain"},
    {Topology::kSameZone, "same-zone"},
    {Topology::kSameRegion, "same-region"},
    {Topology::kSpread, "spread"}}};

constexpr std::array<std::pair<BackfillMode, const char*>, 3> kBackfillModes{{
    {BackfillMode::kNone, "none"}, {BackfillMode::kEasy, "easy"},
    {BackfillMode::kConservative, "conservative"}}};

constexpr std::array<std::pair<FairshareAlgorithm, const char*>, 2> kFairshare{{
    {FairshareAlgorithm::kClassic, "classic"}, {FairshareAlgorithm::kFairTree, "fair-tree"}}};

}  // namespace

const char* PoolName(Pool p) { return NameOf(kPools, p); }
std::optional<Pool> ParsePool(const std::string& s) { return ParseName(kPools, s); }

const char* JobStateName(JobState s) { return NameOf(kJobStates, s); }
std::optional<JobState> ParseJobState(const std::string& s) { return ParseName(kJobStates, s); }

bool IsFinal(JobState s) {
  return s == JobState::kCompleted || s == JobState::kFailed || s == JobState::kCancelled ||
         s == JobState::kTimeout;
}

const char* PendingReasonName(PendingReason r) { return NameOf(kReasons, r); }

std::optional<Topology> ParseTopology(const std::string& s) {
  if (auto t = ParseName(kTopologies, s)) return t;
  return ParseName(kTopologies, "same-" + s);  // "domain", "zone", "region" as mlsub spells them
}
const char* TopologyName(Topology t) { return NameOf(kTopologies, t); }

const char* BackfillModeName(BackfillMode m) { return NameOf(kBackfillModes, m); }
std::optional<BackfillMode> ParseBackfillMode(const std::string& s) {
  return ParseName(kBackfillModes, s);
}

const char* PreemptModeName(PreemptMode m) { return NameOf(kPreemptModes, m); }
std::optional<PreemptMode> ParsePreemptMode(const std::string& s) { return ParseName(kPreemptModes, s); }

const char* IdleActionName(IdleRule::Action a) {
  switch (a) {
    case IdleRule::Action::kNotify: return "notify";
    case IdleRule::Action::kRequeue: return "requeue";
    case IdleRule::Action::kCancel: return "cancel";
  }
  return "?";
}

std::optional<IdleRule> IdleRuleFor(const PolicySet& policy, const JobSpec& spec) {
  const IdlePolicy& p = policy.idle;
  auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const std::string& qos = spec.qos.empty() ? policy.default_qos : spec.qos;
  const std::string& partition = spec.partition.empty() ? policy.default_partition : spec.partition;
  if (listed(p.exempt_users, spec.user) || listed(p.exempt_accounts, spec.account) || listed(p.exempt_qos, qos))
    return std::nullopt;
  IdleRule rule = p.rule;
  if (auto it = p.qos.find(qos); it != p.qos.end()) rule = it->second;
  else if (auto pt = p.partitions.find(partition); pt != p.partitions.end()) rule = pt->second;
  if (rule.gpu_util_below <= 0) return std::nullopt;
  return rule;
}

const char* FairshareAlgorithmName(FairshareAlgorithm a) { return NameOf(kFairshare, a); }
std::optional<FairshareAlgorithm> ParseFairshareAlgorithm(const std::string& s) {
  return ParseName(kFairshare, s);
}

std::vector<int32_t> GangSizes(const JobSpec& spec) {
  if (!IsElastic(spec)) return {spec.ntasks};
  const int32_t step = std::max<int32_t>(spec.elastic.step, 1);
  std::vector<int32_t> sizes;
  for (int64_t n = spec.elastic.min_tasks; n <= spec.ntasks; n += step) sizes.push_back(static_cast<int32_t>(n));
  std::reverse(sizes.begin(), sizes.end());
  return sizes;
}

Duration ElasticRuntime(const Job& job, int32_t tasks) {
  const Duration planned = PlannedRuntime(job);
  if (!IsElastic(job.spec) || tasks <= 0) return planned;
  return planned * job.spec.elastic.min_tasks / tasks;
}

std::optional<std::string> CheckGangSize(const JobSpec& spec) {
  if (spec.ntasks < 1) return "ntasks must be >= 1 (got " + std::to_string(spec.ntasks) + ")";
  if (!IsElastic(spec)) return std::nullopt;
  const TaskRange& r = spec.elastic;
  if (r.min_tasks > spec.ntasks)
    return "min_tasks " + std::to_string(r.min_tasks) + " is above the largest size " + std::to_string(spec.ntasks);
  if (r.step < 1) return "task_step must be >= 1 (got " + std::to_string(r.step) + ")";
  if ((spec.ntasks - r.min_tasks) % r.step != 0)
    return "task range " + std::to_string(r.min_tasks) + "-" + std::to_string(spec.ntasks) + " is not a multiple of task_step " +
           std::to_string(r.step);
  return std::nullopt;
}

}  // namespace mlsched::core
