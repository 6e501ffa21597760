// Controller: elastic capacity through the provisioning programs ([provisioning.POOL]). The
// decision is core::PlanProvisioning; here its requests and releases become program runs, events
// (job events "provision" for the jobs a request is for; node events "provision-registered",
// "provision-failed", "provision-release"), notes in the waiting jobs' reason and metrics.
#include <spdlog/spdlog.h>

#include "common/hostlist.h"
#include "common/units.h"
#include "mlsched/v1/stored.pb.h"
#include "schedd/server/controller.h"

namespace mlsched::server {
namespace {

// Most jobs one request writes its "provision" event and note to (the rest are counted).
constexpr size_t kMaxProvisionEventJobs = 64;
// Largest stored name index ("<pool>-p<N>") accepted: far above any real count, far below overflow.
constexpr int64_t kMaxNameIndex = int64_t{1} << 40;

const core::ProvisioningPolicy* Config(const core::PolicySet& policy, core::Pool pool) {
  for (const auto& c : policy.provisioning)
    if (c.pool == pool) return &c;
  return nullptr;
}

// The node shape for the programs' environment, in agentd's flag words.
std::map<std::string, std::string> ShapeEnv(const core::ProvisioningPolicy& c) {
  const core::ResourceVector& cap = c.shape.capacity;
  std::string gpus = "none", features;
  for (const auto& [type, n] : cap.gpus) gpus = (type.empty() ? "gpu" : type) + ":" + std::to_string(n);
  bool root_jobs = false;
  for (const auto& f : c.shape.features) {
    if (f == core::kRootJobsFeature) root_jobs = true;
    else features += (features.empty() ? "" : ",") + f;
  }
  return {{"MLSCHED_PROVISION_POOL", core::PoolName(c.pool)},
          {"MLSCHED_PROVISION_CPUS", std::to_string(cap.cpu_millis) + "m"},
          {"MLSCHED_PROVISION_MEMORY", std::to_string(cap.memory_bytes >> 20)},  // MB, as agentd --mem
          {"MLSCHED_PROVISION_GPUS", gpus},
          {"MLSCHED_PROVISION_REGION", c.shape.region},
          {"MLSCHED_PROVISION_ZONE", c.shape.zone},
          {"MLSCHED_PROVISION_DOMAIN", c.shape.domain},
          {"MLSCHED_PROVISION_FEATURES", features},
          {"MLSCHED_PROVISION_ROOT_JOBS", root_jobs ? "1" : "0"}};
}

std::string NodeCount(size_t n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

}  // namespace

std::string SerializeProvisionLedger(const core::ProvisionLedger& ledger, const ReleasingNodes& releasing) {
  v1::StoredProvisionLedger s;
  for (const core::ProvisionedNode& n : ledger.nodes) {
    v1::StoredProvisionedNode* out = s.add_nodes();
    out->set_name(n.name);
    out->set_pool(core::PoolName(n.pool));
    out->set_registered(n.registered);
    out->set_requested_at(n.requested_at);
    out->set_idle_since(n.idle_since);
  }
  for (const auto& [pool, index] : ledger.next_index) (*s.mutable_next_index())[core::PoolName(pool)] = index;
  for (const auto& [name, pool] : releasing) {
    v1::StoredProvisionedNode* out = s.add_releasing();
    out->set_name(name);
    out->set_pool(core::PoolName(pool));
  }
  return s.SerializeAsString();
}

std::optional<core::ProvisionLedger> ParseProvisionLedger(const std::string& bytes, std::string* error,
                                                          ReleasingNodes* releasing) {
  v1::StoredProvisionLedger s;
  if (bytes.size() > kMaxProvisionLedgerBytes || !s.ParseFromString(bytes)) {
    *error = "not a StoredProvisionLedger of at most " + std::to_string(kMaxProvisionLedgerBytes) + " bytes";
    return std::nullopt;
  }
  core::ProvisionLedger ledger;
  for (const auto& n : s.nodes()) {
    const std::optional<core::Pool> pool = core::ParsePool(n.pool());
    if (!pool || n.name().empty() || n.name().size() > RegistrationLimits::kMaxNodeName) {
      *error = "node '" + n.name().substr(0, RegistrationLimits::kMaxNodeName) + "' of pool '" + n.pool().substr(0, 32) + "' is invalid";
      return std::nullopt;
    }
    ledger.nodes.push_back(core::ProvisionedNode{n.name(), *pool, n.registered(), n.requested_at(), n.idle_since()});
  }
  for (const auto& [name, index] : s.next_index()) {
    const std::optional<core::Pool> pool = core::ParsePool(name);
    if (!pool || index < 0 || index > kMaxNameIndex) {
      *error = "next_index of pool '" + name.substr(0, 32) + "' is invalid";
      return std::nullopt;
    }
    ledger.next_index[*pool] = index;
  }
  for (const auto& n : s.releasing()) {
    const std::optional<core::Pool> pool = core::ParsePool(n.pool());
    if (!pool || n.name().empty() || n.name().size() > RegistrationLimits::kMaxNodeName) {
      *error = "releasing node '" + n.name().substr(0, RegistrationLimits::kMaxNodeName) + "' of pool '" +
               n.pool().substr(0, 32) + "' is invalid";
      return std::nullopt;
    }
    if (releasing) (*releasing)[n.name()] = *pool;
  }
  return ledger;
}

void Controller::RecoverProvisionedLocked() {
  const std::string bytes = store_.LoadProvisionLedger();
  if (bytes.empty()) return;
  std::string error;
  ReleasingNodes releasing;
  if (auto ledger = ParseProvisionLedger(bytes, &error, &releasing)) {
    provisioned_ = std::move(*ledger);
    for (core::ProvisionedNode& n : provisioned_.nodes) n.idle_since = 0;  // idle clocks restart now
    releasing_ = std::move(releasing);
    for (const auto& [name, pool] : releasing_) suspend_unsent_.insert(name);  // run them again
    spdlog::info("provisioning: {} created node(s) recovered from the store, {} being released",
                 provisioned_.nodes.size(), releasing_.size());
  } else {
    spdlog::error("provisioning: the stored ledger is unreadable ({}); created nodes are no longer tracked", error);
  }
}

void Controller::SetProvisionRunner(ProvisionRunner* r) {
  std::lock_guard lk(mu_);
  runner_ = r;
}

core::ProvisionLedger Controller::ProvisionedNodes() {
  std::lock_guard lk(mu_);
  return provisioned_;
}

void Controller::OnProgramDone(const ProgramCall& call, const ProgramResult&) {
  if (call.kind != "suspend") return;
  const auto names = ExpandHostlist(call.hostlist);
  if (!names) return;
  std::lock_guard lk(mu_);
  for (const std::string& n : *names.value)
    if (releasing_.erase(n) > 0) releasing_dirty_ = true;
}

ReleasingNodes Controller::ReleasingProvisionedNodes() {
  std::lock_guard lk(mu_);
  return releasing_;
}

void Controller::ResubmitSuspendsLocked(const core::PolicySet& policy) {
  std::map<core::Pool, std::vector<std::string>> by_pool;
  for (const std::string& name : suspend_unsent_)
    if (auto it = releasing_.find(name); it != releasing_.end()) by_pool[it->second].push_back(name);
  suspend_unsent_.clear();
  for (const auto& [pool, names] : by_pool) {
    const core::ProvisioningPolicy* c = Config(policy, pool);
    if (!c) {  // the pool is gone from the policy: nothing to run them with
      for (const auto& n : names) releasing_.erase(n);
      releasing_dirty_ = true;
      spdlog::warn("provisioning: pool {} no longer provisioned; {} not suspended", core::PoolName(pool), names.size());
      continue;
    }
    ProgramCall call{"suspend", c->suspend_program, CompressHostlist(names), ShapeEnv(*c),
                     static_cast<int>(c->resume_timeout)};
    if (!runner_->Submit(std::move(call))) suspend_unsent_.insert(names.begin(), names.end());  // next cycle
  }
}

void Controller::ProvisionLocked(const core::ClusterState& snap, const core::CyclePlan& plan,
                                 const core::PolicySet& policy, int64_t now) {
  if (!runner_ || (policy.provisioning.empty() && provisioned_.nodes.empty() && releasing_.empty() && !releasing_dirty_))
    return;
  ResubmitSuspendsLocked(policy);
  core::ProvisioningPlan pp = core::PlanProvisioning(snap, plan, policy, provisioned_, now);
  for (const auto& r : pp.suspend) releasing_[r.node] = r.pool;
  // Durable before any program runs: a schedd that dies after a resume program started still
  // knows the node (and releases it); a released node stays stored until its suspend program
  // has finished (run again after a restart).
  if (!(pp.ledger == provisioned_) || !pp.suspend.empty() || releasing_dirty_) {
    Await(store_.SaveProvisionLedger(SerializeProvisionLedger(pp.ledger, releasing_)));
    releasing_dirty_ = false;
  }
  for (const auto& n : pp.ledger.nodes) {
    if (!n.registered) continue;
    const bool was = std::any_of(provisioned_.nodes.begin(), provisioned_.nodes.end(),
                                 [&](const core::ProvisionedNode& o) { return o.name == n.name && o.registered; });
    if (was) continue;
    const std::string detail = "registered " + std::to_string(now - n.requested_at) + " s after the request";
    Await(store_.AppendEvent(0, n.name, "provision-registered", detail));
    if (metrics_) metrics_->CountProvision(core::PoolName(n.pool), "registered", 1);
    spdlog::info("provisioning: {} {}", n.name, detail);
  }
  // Suspend: one program run per pool for its released and failed nodes together.
  std::map<core::Pool, std::vector<std::string>> to_suspend;
  for (const auto& r : pp.suspend) {
    const char* event = r.failed ? "failed" : "released";
    Await(store_.AppendEvent(0, r.node, r.failed ? "provision-failed" : "provision-release", r.reason));
    if (metrics_) metrics_->CountProvision(core::PoolName(r.pool), event, 1);
    spdlog::info("provisioning: {} {}: {}", r.node, event, r.reason);
    to_suspend[r.pool].push_back(r.node);
  }
  for (const auto& [pool, names] : to_suspend) {
    const core::ProvisioningPolicy* c = Config(policy, pool);
    if (!c) continue;  // PlanProvisioning releases only nodes of configured pools
    ProgramCall call{"suspend", c->suspend_program, CompressHostlist(names), ShapeEnv(*c),
                     static_cast<int>(c->resume_timeout)};
    if (!runner_->Submit(std::move(call))) {
      spdlog::error("provisioning: queue full, suspend of {} node(s) retried next cycle", names.size());
      suspend_unsent_.insert(names.begin(), names.end());
    }
  }
  for (const auto& r : pp.resume) {
    const core::ProvisioningPolicy* c = Config(policy, r.pool);
    const std::string hostlist = CompressHostlist(r.nodes);
    const std::string note = "requested " + NodeCount(r.nodes.size()) + " from pool " + core::PoolName(r.pool) +
                             " (" + hostlist + ")";
    const std::string detail = note + ": " + r.detail;
    for (size_t i = 0; i < r.jobs.size() && i < kMaxProvisionEventJobs; ++i) {
      Await(store_.AppendEvent(r.jobs[i], "", "provision", detail));
      if (JobRec* j = Find(r.jobs[i])) j->provision_note = note;
    }
    if (metrics_) metrics_->CountProvision(core::PoolName(r.pool), "requested", static_cast<double>(r.nodes.size()));
    spdlog::info("provisioning: {}", detail);
    ProgramCall call{"resume", c->resume_program, hostlist, ShapeEnv(*c), static_cast<int>(c->resume_timeout)};
    if (!runner_->Submit(std::move(call))) spdlog::error("provisioning: queue full, resume of {} dropped", hostlist);
  }
  provisioned_ = std::move(pp.ledger);
  provision_cost_.clear();
  for (const auto& [pool, cost] : pp.cost_per_hour) provision_cost_[core::PoolName(pool)] = cost;
}

}  // namespace mlsched::server
