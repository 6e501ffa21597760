#include "schedd/sim/policy_file.h"

#include <set>
#include <stdexcept>

#include <toml++/toml.h>

namespace mlsched::sim {
namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& message) {
  throw std::runtime_error(where + ": " + message);
}

void CheckKeys(const toml::table& t, const std::string& where,
               std::initializer_list<std::string_view> known) {
  for (auto&& [key, value] : t) {
    bool ok = false;
    for (auto k : known) ok = ok || key.str() == k;
    if (!ok) Fail(where, "unknown key '" + std::string(key.str()) + "'");
  }
}

/// Integer `key` of `t` (>= min), or `fallback` when absent.
int64_t Int(const toml::table& t, std::string_view key, int64_t fallback, int64_t min,
            const std::string& where) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return fallback;
  auto v = n->value<int64_t>();
  if (!v || *v < min) Fail(where, std::string(key) + ": want an integer >= " + std::to_string(min));
  return *v;
}

std::string Str(const toml::table& t, std::string_view key, const std::string& fallback,
                const std::string& where) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return fallback;
  auto v = n->value<std::string>();
  if (!v) Fail(where, std::string(key) + ": want a string");
  return *v;
}

const toml::table& Table(const toml::node& n, const std::string& where) {
  const toml::table* t = n.as_table();
  if (t == nullptr) Fail(where, "want a table");
  return *t;
}

core::PartitionPolicy ReadPartition(const toml::table& t, const std::string& where) {
  CheckKeys(t, where, {"name", "default_time_limit_s", "max_time_limit_s", "pools", "up",
                       "priority_tier", "max_tasks_per_job"});
  core::PartitionPolicy p;
  p.name = Str(t, "name", "", where);
  if (p.name.empty()) Fail(where, "name: required");
  p.default_time_limit = Int(t, "default_time_limit_s", p.default_time_limit, 1, where);
  p.max_time_limit = Int(t, "max_time_limit_s", p.max_time_limit, 1, where);
  p.priority_tier = Int(t, "priority_tier", 0, 0, where);
  p.max_tasks_per_job = static_cast<int32_t>(Int(t, "max_tasks_per_job", 0, 0, where));
  p.up = t["up"].value_or(true);
  if (const toml::array* pools = t["pools"].as_array()) {
    for (const auto& v : *pools) {
      auto s = v.value<std::string>();
      if (!s || !core::ParsePool(*s)) Fail(where, "pools: want on-demand, spot or reserved");
      p.pools.push_back(*s);
    }
  }
  return p;
}

void ReadBackfill(const toml::node& n, const std::string& where, core::BackfillPolicy& b,
                  core::PolicySet& policy) {
  if (auto mode = n.value<std::string>()) {  // backfill = "easy"
    SetBackfillMode(policy, *mode);
    return;
  }
  const toml::table& t = Table(n, where);
  CheckKeys(t, where, {"mode", "order", "depth", "max_job_test", "window_s", "resolution_s",
                       "keep_plans"});
  SetBackfillMode(policy, Str(t, "mode", "none", where));
  SetBackfillOrder(policy, Str(t, "order", "queue", where));
  b.depth = static_cast<int32_t>(Int(t, "depth", 0, 0, where));
  b.max_job_test = static_cast<int32_t>(Int(t, "max_job_test", 0, 0, where));
  b.window = Int(t, "window_s", 0, 0, where);
  b.resolution = Int(t, "resolution_s", 1, 1, where);
  if (const toml::node* k = t.get("keep_plans")) {
    const toml::value<bool>* v = k->as_boolean();
    if (v == nullptr) Fail(where, "keep_plans: want true or false");
    b.keep_plans = v->get();
  }
}

void ReadWeights(const toml::table& t, const std::string& where, core::PriorityWeights& w) {
  CheckKeys(t, where, {"age", "fairshare", "job_size", "partition", "qos", "max_age_s",
                       "favor_small"});
  w.age = Int(t, "age", 0, 0, where);
  w.fairshare = Int(t, "fairshare", 0, 0, where);
  w.job_size = Int(t, "job_size", 0, 0, where);
  w.partition = Int(t, "partition", 0, 0, where);
  w.qos = Int(t, "qos", 0, 0, where);
  w.max_age = Int(t, "max_age_s", w.max_age, 1, where);
  w.favor_small = t["favor_small"].value_or(false);
}

void ReadFairshare(const toml::table& t, const std::string& where, core::FairsharePolicy& f) {
  CheckKeys(t, where, {"algorithm", "half_life_s", "billing"});
  auto algo = core::ParseFairshareAlgorithm(Str(t, "algorithm", "classic", where));
  if (!algo) Fail(where, "algorithm: want classic or fair-tree");
  f.algorithm = *algo;
  f.half_life = Int(t, "half_life_s", f.half_life, 0, where);
  if (const toml::node* b = t.get("billing")) {
    for (auto&& [key, value] : Table(*b, where + ".billing")) {
      auto v = value.value<double>();
      if (!v || *v < 0) Fail(where + ".billing." + std::string(key.str()), "want a number >= 0");
      f.billing_weights[std::string(key.str())] = *v;
    }
  }
}

core::AccountPolicy ReadAccount(const toml::table& t, const std::string& where) {
  CheckKeys(t, where, {"name", "parent", "shares", "users", "max_gpus", "max_cpu_millis",
                       "max_running_jobs"});
  core::AccountPolicy a;
  a.name = Str(t, "name", "", where);
  if (a.name.empty()) Fail(where, "name: required");
  a.parent = Str(t, "parent", "", where);
  a.shares = Int(t, "shares", 1, 0, where);
  a.max_gpus = Int(t, "max_gpus", 0, 0, where);
  a.max_cpu_millis = Int(t, "max_cpu_millis", 0, 0, where);
  a.max_running_jobs = static_cast<int32_t>(Int(t, "max_running_jobs", 0, 0, where));
  if (const toml::node* users = t.get("users")) {
    const toml::table& u = Table(*users, where + ".users");
    for (auto&& [user, value] : u) a.user_shares[std::string(user.str())] = Int(u, user.str(), 1, 0, where + ".users");
  }
  return a;
}

core::QosPolicy ReadQos(const toml::table& t, const std::string& where) {
  CheckKeys(t, where, {"name", "priority", "max_wall_s", "max_gpus_per_job", "max_gpus_per_user",
                       "max_running_jobs_per_user", "preempt", "preempt_mode", "grace_time_s",
                       "preempt_exempt_time_s", "max_preemptions"});
  core::QosPolicy q;
  q.name = Str(t, "name", "", where);
  if (q.name.empty()) Fail(where, "name: required");
  q.priority = Int(t, "priority", 0, 0, where);
  q.max_wall = Int(t, "max_wall_s", 0, 0, where);
  q.max_gpus_per_job = Int(t, "max_gpus_per_job", 0, 0, where);
  q.max_gpus_per_user = Int(t, "max_gpus_per_user", 0, 0, where);
  q.max_running_jobs_per_user = static_cast<int32_t>(Int(t, "max_running_jobs_per_user", 0, 0, where));
  if (const toml::node* p = t.get("preempt")) {
    const toml::array* a = p->as_array();
    if (a == nullptr) Fail(where, "preempt: want an array of QoS names");
    for (const auto& v : *a) {
      auto s = v.value<std::string>();
      if (!s || s->empty()) Fail(where, "preempt: want an array of QoS names");
      q.preempt.push_back(*s);
    }
  }
  const std::string mode = Str(t, "preempt_mode", core::PreemptModeName(q.preempt_mode), where);
  auto parsed = core::ParsePreemptMode(mode);
  if (!parsed) Fail(where, "preempt_mode: want requeue or cancel, not '" + mode + "'");
  q.preempt_mode = *parsed;
  q.grace_time = Int(t, "grace_time_s", q.grace_time, 0, where);
  q.preempt_exempt_time = Int(t, "preempt_exempt_time_s", 0, 0, where);
  q.max_preemptions = static_cast<int32_t>(Int(t, "max_preemptions", 0, 0, where));
  return q;
}

/// Every QoS named in a preempt list exists, and no QoS may preempt itself, directly or through
/// others (the core orders the queue by preemption tier, which needs an acyclic relation).
void CheckPreemptLists(const std::vector<core::QosPolicy>& qos, const std::string& path) {
  std::map<std::string, const core::QosPolicy*> by_name;
  for (const auto& q : qos) {
    if (!by_name.emplace(q.name, &q).second) Fail(path + ": [[qos]] " + q.name, "name: defined twice");
  }
  for (const auto& q : qos) {
    for (const auto& victim : q.preempt) {
      if (by_name.count(victim) == 0) {
        Fail(path + ": [[qos]] " + q.name, "preempt: no QoS named '" + victim + "'");
      }
    }
  }
  // Depth-first search from each QoS; reaching it again is a cycle.
  for (const auto& q : qos) {
    std::vector<std::string> stack(q.preempt.begin(), q.preempt.end());
    std::set<std::string> seen;
    while (!stack.empty()) {
      std::string name = stack.back();
      stack.pop_back();
      if (name == q.name) Fail(path + ": [[qos]] " + q.name, "preempt: it may preempt itself (a cycle)");
      if (!seen.insert(name).second) continue;
      for (const auto& next : by_name.at(name)->preempt) stack.push_back(next);
    }
  }
}

/// Calls read(table, where) for every table of the array `key`.
template <typename Read>
void ForEachTable(const toml::table& root, std::string_view key, const std::string& path, Read read) {
  const toml::node* n = root.get(key);
  if (n == nullptr) return;
  const toml::array* a = n->as_array();
  if (a == nullptr) Fail(path + ": " + std::string(key), "want an array of tables [[" + std::string(key) + "]]");
  for (size_t i = 0; i < a->size(); ++i) {
    const std::string where = path + ": [[" + std::string(key) + "]] #" + std::to_string(i + 1);
    read(Table((*a)[i], where), where);
  }
}

}  // namespace

core::PolicySet ReadPolicyFile(const std::string& path, std::map<std::string, double>* shares) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    Fail(path + ":" + std::to_string(e.source().begin.line), std::string(e.description()));
  }
  CheckKeys(root, path, {"default_partition", "partitions", "queue_order", "backfill", "weights",
                         "fairshare", "accounts", "qos", "default_qos", "victim_order"});
  core::PolicySet policy;
  if (root.get("partitions") != nullptr) policy.partitions.clear();
  ForEachTable(root, "partitions", path, [&](const toml::table& t, const std::string& where) {
    policy.partitions.push_back(ReadPartition(t, where));
  });
  policy.default_partition = Str(root, "default_partition", policy.default_partition, path);
  SetQueueOrder(policy, Str(root, "queue_order", "fifo", path));
  if (const toml::node* b = root.get("backfill")) {
    ReadBackfill(*b, path + ": backfill", policy.backfill, policy);
  }
  if (const toml::node* w = root.get("weights")) {
    ReadWeights(Table(*w, path + ": weights"), path + ": weights", policy.weights);
  }
  if (const toml::node* f = root.get("fairshare")) {
    ReadFairshare(Table(*f, path + ": fairshare"), path + ": fairshare", policy.fairshare);
  }
  ForEachTable(root, "accounts", path, [&](const toml::table& t, const std::string& where) {
    policy.accounts.push_back(ReadAccount(t, where));
  });
  ForEachTable(root, "qos", path, [&](const toml::table& t, const std::string& where) {
    policy.qos.push_back(ReadQos(t, where));
  });
  CheckPreemptLists(policy.qos, path);
  policy.default_qos = Str(root, "default_qos", policy.default_qos, path);
  if (root.get("victim_order") != nullptr) {
    const std::string order = Str(root, "victim_order", "", path);
    try {
      SetVictimOrder(policy, order);
    } catch (const std::invalid_argument&) {
      Fail(path + ": victim_order",
           "want \"least-lost-work\" or \"youngest-first\", not '" + order + "'");
    }
  }
  if (shares != nullptr) {
    for (const auto& a : policy.accounts) (*shares)[a.name] = static_cast<double>(a.shares);
  }
  return policy;
}

void SetBackfillMode(core::PolicySet& policy, const std::string& mode) {
  auto m = core::ParseBackfillMode(mode);
  if (!m) throw std::invalid_argument("unknown backfill mode '" + mode + "' (want none, easy or conservative)");
  policy.backfill.mode = *m;
}

void SetBackfillOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "queue") {
    policy.backfill.order = core::BackfillOrder::kQueue;
  } else if (order == "shortest-first") {
    policy.backfill.order = core::BackfillOrder::kShortestFirst;
  } else {
    throw std::invalid_argument("unknown backfill order '" + order + "' (want queue or shortest-first)");
  }
}

void SetQueueOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "fifo") {
    policy.queue_order = core::QueueOrder::kFifo;
  } else if (order == "multifactor") {
    policy.queue_order = core::QueueOrder::kMultifactor;
  } else {
    throw std::invalid_argument("unknown queue order '" + order + "' (want fifo or multifactor)");
  }
}

void SetVictimOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "least-lost-work") {
    policy.victim_order = core::VictimOrder::kLeastLostWork;
  } else if (order == "youngest-first") {
    policy.victim_order = core::VictimOrder::kYoungestFirst;
  } else {
    throw std::invalid_argument("unknown victim order '" + order +
                                "' (want least-lost-work or youngest-first)");
  }
}

const char* VictimOrderName(core::VictimOrder order) {
  return order == core::VictimOrder::kYoungestFirst ? "youngest-first" : "least-lost-work";
}

std::string DescribeSchedulingPolicy(const core::PolicySet& policy) {
  std::string out = policy.queue_order == core::QueueOrder::kFifo ? "fifo" : "multifactor";
  if (policy.backfill.mode != core::BackfillMode::kNone) {
    out += std::string("+") + core::BackfillModeName(policy.backfill.mode);
    if (policy.backfill.order == core::BackfillOrder::kShortestFirst) out += "(shortest-first)";
    if (policy.backfill.mode == core::BackfillMode::kConservative && policy.backfill.keep_plans) {
      out += "(keep-plans)";
    }
  }
  for (const auto& q : policy.qos) {
    if (q.preempt.empty()) continue;
    out += std::string(", ") + VictimOrderName(policy.victim_order) + " victims";
    break;
  }
  return out;
}

}  // namespace mlsched::sim
