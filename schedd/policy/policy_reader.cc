#include "schedd/policy/policy_reader.h"

#include <algorithm>
#include <map>
#include <set>

namespace mlsched::policy {
namespace {

constexpr double kMaxTierSpeedup = 1000;  // [elastic] tier_speedup: preferred vs fallback accelerator

const char* TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

}  // namespace

void PolicyReader::Error(const toml::source_region& where, std::string message) {
  errors_.push_back({file_, static_cast<int>(where.begin.line), static_cast<int>(where.begin.column),
                     std::move(message)});
}

void PolicyReader::CheckKeys(const toml::table& table, std::initializer_list<const char*> allowed,
                             const std::string& context) {
  for (auto&& [key, value] : table) {
    bool known = false;
    for (const char* a : allowed) known = known || key.str() == a;
    if (known) continue;
    std::string expected;
    for (const char* a : allowed) expected += std::string(expected.empty() ? "" : ", ") + a;
    Error(key.source(), "unknown key '" + std::string(key.str()) + "' in " + context +
                            "; expected one of: " + expected);
  }
}

void PolicyReader::Int(const toml::table& t, const char* key, int64_t& out, int64_t min,
                       const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  auto v = n->value_exact<int64_t>();
  if (!v) return Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected an integer, got " + TypeName(*n));
  if (*v < min)
    return Error(n->source(), std::string("'") + key + "' in " + ctx + ": must be >= " + std::to_string(min) +
                                  ", got " + std::to_string(*v));
  out = *v;
}

void PolicyReader::Int32(const toml::table& t, const char* key, int32_t& out, int64_t min,
                         const std::string& ctx) {
  int64_t v = out;
  Int(t, key, v, min, ctx);
  if (v > INT32_MAX) {
    Error(t.get(key)->source(), std::string("'") + key + "' in " + ctx + ": too large");
    return;
  }
  out = static_cast<int32_t>(v);
}

void PolicyReader::Dur(const toml::table& t, const char* key, core::Duration& out, const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (auto i = n->value_exact<int64_t>()) {
    if (*i < 0) return Error(n->source(), std::string("'") + key + "' in " + ctx + ": must be >= 0 seconds");
    if (*i > kMaxDuration)
      return Error(n->source(), std::string("'") + key + "' in " + ctx + ": must be at most " +
                                    std::to_string(kMaxDuration) + " seconds (1000 years)");
    out = *i;
    return;
  }
  if (auto s = n->value_exact<std::string>()) {
    if (auto d = ParseDuration(*s)) {
      out = *d;
      return;
    }
    return Error(n->source(), std::string("'") + key + "' in " + ctx + ": invalid duration '" + *s +
                                  "'; expected seconds or e.g. \"90s\", \"45m\", \"4h\", \"7d\", \"1-12:00:00\"");
  }
  Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected a duration (integer seconds or string), got " +
                         TypeName(*n));
}

void PolicyReader::Str(const toml::table& t, const char* key, std::string& out, const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (auto s = n->value_exact<std::string>()) {
    out = *s;
    return;
  }
  Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected a string, got " + TypeName(*n));
}

void PolicyReader::Bool(const toml::table& t, const char* key, bool& out, const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  if (auto b = n->value_exact<bool>()) {
    out = *b;
    return;
  }
  Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected true or false, got " + TypeName(*n));
}

void PolicyReader::StrList(const toml::table& t, const char* key, std::vector<std::string>& out,
                           const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  const toml::array* a = n->as_array();
  if (!a) return Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected an array of strings, got " + TypeName(*n));
  out.clear();
  for (const toml::node& e : *a) {
    if (auto s = e.value_exact<std::string>()) out.push_back(*s);
    else Error(e.source(), std::string("'") + key + "' in " + ctx + ": expected strings, got " + TypeName(e));
  }
}

void PolicyReader::EachTable(const toml::table& root, const char* key,
                             const std::function<void(const toml::table&, const std::string&)>& fn) {
  const toml::node* n = root.get(key);
  if (!n) return;
  const toml::array* a = n->as_array();
  if (!a || !a->is_array_of_tables())
    return Error(n->source(), std::string("'") + key + "': expected an array of tables ([[" + key + "]])");
  size_t i = 0;
  for (const toml::node& e : *a) fn(*e.as_table(), std::string("[[") + key + "]] #" + std::to_string(++i));
}

core::PolicySet PolicyReader::Read(const toml::table& root) {
  core::PolicySet p;
  CheckKeys(root, {"default_partition", "default_qos", "operators", "enforce_associations", "scheduler", "backfill",
                   "priority", "fairshare", "partitions", "qos", "accounts", "users", "pricing", "placement",
                   "preemption", "warm_pools", "limits", "simulation", "prediction", "elastic", "provisioning",
                   "inventory", "nodes", "interactive", "health", "watchdog", "idle"},
            "the top level");  // [pricing.POOL] is also read by mlreport (schedd/report)
  Str(root, "default_partition", p.default_partition, "the top level");
  Str(root, "default_qos", p.default_qos, "the top level");
  StrList(root, "operators", p.operators, "the top level");
  Bool(root, "enforce_associations", p.enforce_associations, "the top level");
  auto section = [&](const char* key, auto&& read) {
    const toml::node* n = root.get(key);
    if (!n) return;
    if (const toml::table* t = n->as_table()) read(*t);
    else Error(n->source(), std::string("'") + key + "': expected a table ([" + key + "])");
  };
  section("scheduler", [&](const toml::table& t) { ReadScheduler(t, p); });
  section("backfill", [&](const toml::table& t) { ReadBackfill(t, p.backfill); });
  section("priority", [&](const toml::table& t) { ReadPriority(t, p.weights); });
  section("fairshare", [&](const toml::table& t) { ReadFairshare(t, p.fairshare); });
  section("placement", [&](const toml::table& t) { ReadPlacement(t, p.placement); });
  section("limits", [&](const toml::table& t) { ReadLimits(t, p.limits); });
  section("pricing", [&](const toml::table& t) { ReadPricing(t, p.placement); });
  section("simulation", [&](const toml::table& t) { ReadSimulation(t, simulation_); });  // mlsim's
  section("prediction", [&](const toml::table& t) { ReadPrediction(t, p.prediction); });
  section("provisioning", [&](const toml::table& t) { ReadProvisioning(t, p); });
  section("inventory", [&](const toml::table& t) { ReadInventory(t, p.inventory); });
  section("interactive", [&](const toml::table& t) { ReadInteractive(t, p.interactive); });
  section("health", [&](const toml::table& t) { ReadHealth(t, p.health); });
  section("watchdog", [&](const toml::table& t) { ReadWatchdog(t, p.watchdog); });
  section("idle", [&](const toml::table& t) { ReadIdle(t, p.idle); });
  EachTable(root, "nodes", [&](const toml::table& t, const std::string& ctx) {
    ReadNodeDeclaration(t, ctx, p.inventory);
  });
  section("elastic", [&](const toml::table& t) {
    CheckKeys(t, {"start", "grow", "min_resize_interval", "restart_cost", "tier_speedup"}, "[elastic]");
    std::string start;
    Str(t, "start", start, "[elastic]");
    if (start == "largest") p.elastic.start = core::ElasticStart::kLargest;
    else if (start == "earliest-finish") p.elastic.start = core::ElasticStart::kEarliestFinish;
    else if (t.get("start") && t.get("start")->is_string())
      Error(t.get("start")->source(),
            "'start' in [elastic]: expected \"largest\" or \"earliest-finish\", got \"" + start.substr(0, 64) + "\"");
    Bool(t, "grow", p.elastic.grow, "[elastic]");
    Dur(t, "min_resize_interval", p.elastic.min_resize_interval, "[elastic]");
    Dur(t, "restart_cost", p.elastic.restart_cost, "[elastic]");
    Num(t, "tier_speedup", p.elastic.tier_speedup, "[elastic]");
    if (const toml::node* n = t.get("tier_speedup");
        n && !(p.elastic.tier_speedup >= 1.0 && p.elastic.tier_speedup <= kMaxTierSpeedup))
      Error(n->source(), "'tier_speedup' in [elastic] must be 1.." + std::to_string(static_cast<int>(kMaxTierSpeedup)) +
                             " (1 = never move back to the preferred accelerator)");
  });
  section("preemption", [&](const toml::table& t) {
    CheckKeys(t, {"victim_order"}, "[preemption]");
    std::string order;
    Str(t, "victim_order", order, "[preemption]");
    if (order == "least-lost-work") p.victim_order = core::VictimOrder::kLeastLostWork;
    else if (order == "youngest-first") p.victim_order = core::VictimOrder::kYoungestFirst;
    else if (!order.empty())
      Error(t.get("victim_order")->source(),
            "'victim_order' in [preemption]: expected \"least-lost-work\" or \"youngest-first\", got \"" + order + "\"");
  });
  if (root.get("partitions")) p.partitions.clear();
  EachTable(root, "partitions", [&](const toml::table& t, const std::string& ctx) {
    p.partitions.push_back(ReadPartition(t, ctx));
  });
  EachTable(root, "qos", [&](const toml::table& t, const std::string& ctx) { p.qos.push_back(ReadQos(t, ctx)); });
  EachTable(root, "accounts", [&](const toml::table& t, const std::string& ctx) {
    p.accounts.push_back(ReadAccount(t, ctx));
  });
  EachTable(root, "users", [&](const toml::table& t, const std::string& ctx) { p.users.push_back(ReadUser(t, ctx)); });
  EachTable(root, "warm_pools", [&](const toml::table& t, const std::string& ctx) {
    p.warm_pools.push_back(ReadWarmPool(t, ctx));
    const std::string& qos = p.warm_pools.back().qos;
    if (!qos.empty() && std::none_of(p.qos.begin(), p.qos.end(), [&](const core::QosPolicy& q) { return q.name == qos; }))
      Error(t.source(), ctx + ": QoS '" + qos + "' is not a defined QoS");
  });
  CheckReferences(root, p);
  CheckInteractive(root, p);
  CheckIdle(root, p);
  CheckAssociations(root, p);
  CheckProvisioning(root, p);
  return p;
}

void PolicyReader::ReadScheduler(const toml::table& t, core::PolicySet& p) {
  CheckKeys(t, {"queue_order"}, "[scheduler]");
  std::string order;
  Str(t, "queue_order", order, "[scheduler]");
  if (order == "fifo") p.queue_order = core::QueueOrder::kFifo;
  else if (order == "multifactor") p.queue_order = core::QueueOrder::kMultifactor;
  else if (!order.empty())
    Error(t.get("queue_order")->source(), "'queue_order' in [scheduler]: expected \"fifo\" or \"multifactor\", got \"" + order + "\"");
}

void PolicyReader::ReadBackfill(const toml::table& t, core::BackfillPolicy& b) {
  const std::string ctx = "[backfill]";
  CheckKeys(t, {"mode", "order", "depth", "max_job_test", "window", "resolution", "keep_plans", "reserve_after",
                "reserve_after_wide", "wide_fraction"}, ctx);
  std::string mode, order;
  Str(t, "mode", mode, ctx);
  if (!mode.empty()) {
    if (auto m = core::ParseBackfillMode(mode)) b.mode = *m;
    else Error(t.get("mode")->source(), "'mode' in [backfill]: expected \"none\", \"easy\" or \"conservative\", got \"" + mode + "\"");
  }
  Str(t, "order", order, ctx);
  if (order == "queue") b.order = core::BackfillOrder::kQueue;
  else if (order == "shortest-first") b.order = core::BackfillOrder::kShortestFirst;
  else if (!order.empty())
    Error(t.get("order")->source(), "'order' in [backfill]: expected \"queue\" or \"shortest-first\", got \"" + order + "\"");
  Int32(t, "depth", b.depth, 0, ctx);
  Int32(t, "max_job_test", b.max_job_test, 0, ctx);
  Dur(t, "window", b.window, ctx);
  Dur(t, "resolution", b.resolution, ctx);
  Bool(t, "keep_plans", b.keep_plans, ctx);
  Dur(t, "reserve_after", b.reserve_after, ctx);
  Dur(t, "reserve_after_wide", b.reserve_after_wide, ctx);
  Num(t, "wide_fraction", b.wide_fraction, ctx);
  if (const toml::node* n = t.get("wide_fraction"); n && !(b.wide_fraction > 0 && b.wide_fraction <= 1))
    Error(n->source(), "'wide_fraction' in [backfill]: must be in (0, 1] (a share of the job's eligible capacity)");
  if (const toml::node* n = t.get("reserve_after_wide"); n && b.reserve_after == 0 && b.reserve_after_wide > 0)
    Error(n->source(), "'reserve_after_wide' in [backfill]: needs 'reserve_after' (the guard for every job) too");
  else if (n && b.reserve_after_wide > 0 && b.reserve_after_wide >= b.reserve_after)
    Error(n->source(), "'reserve_after_wide' in [backfill]: must be shorter than 'reserve_after' (else it changes nothing)");
  if (b.resolution < 1) Error(t.get("resolution")->source(), "'resolution' in [backfill]: must be at least 1 second");
}

void PolicyReader::ReadLimits(const toml::table& t, core::InputLimits& l) {
  const std::string ctx = "[limits]";
  CheckKeys(t, {"max_name_bytes", "max_script_bytes", "max_env_bytes", "max_env_vars", "max_argv_bytes", "max_argv",
                "max_field_bytes", "max_list_items", "max_ids_per_request", "max_array_bytes",
                "max_pending_jobs_per_user", "max_pending_bytes_per_user", "submit_rate_per_user",
                "submit_burst_per_user"},
            ctx);
  Int(t, "max_name_bytes", l.max_name_bytes, 1, ctx);
  Int(t, "max_script_bytes", l.max_script_bytes, 1, ctx);
  Int(t, "max_env_bytes", l.max_env_bytes, 0, ctx);
  Int32(t, "max_env_vars", l.max_env_vars, 0, ctx);
  Int(t, "max_argv_bytes", l.max_argv_bytes, 1, ctx);
  Int32(t, "max_argv", l.max_argv, 1, ctx);
  Int(t, "max_field_bytes", l.max_field_bytes, 64, ctx);
  Int32(t, "max_list_items", l.max_list_items, 1, ctx);
  Int32(t, "max_ids_per_request", l.max_ids_per_request, 1, ctx);
  Int(t, "max_array_bytes", l.max_array_bytes, 1, ctx);
  Int32(t, "max_pending_jobs_per_user", l.max_pending_jobs_per_user, 0, ctx);
  Int(t, "max_pending_bytes_per_user", l.max_pending_bytes_per_user, 0, ctx);
  if (l.max_list_items > 64)
    Error(t.get("max_list_items")->source(), ctx + ": 'max_list_items' must be at most 64 (GPU types and fallback tiers of one job)");
  Int32(t, "submit_rate_per_user", l.submit_rate_per_user, 0, ctx);
  Int32(t, "submit_burst_per_user", l.submit_burst_per_user, 1, ctx);
  // A request must fit in schedd's largest gRPC message (kMaxRequestBytes, 16 MiB).
  if (l.max_script_bytes + l.max_env_bytes + l.max_argv_bytes > (16 << 20))
    Error(t.source(), ctx + ": max_script_bytes + max_env_bytes + max_argv_bytes must be at most 16 MiB (schedd's request limit)");
}

void PolicyReader::ReadPriority(const toml::table& t, core::PriorityWeights& w) {
  const std::string ctx = "[priority]";
  CheckKeys(t, {"weight_age", "weight_fairshare", "weight_job_size", "weight_partition", "weight_qos",
                "max_age", "favor_small"},
            ctx);
  Int(t, "weight_age", w.age, 0, ctx);
  Int(t, "weight_fairshare", w.fairshare, 0, ctx);
  Int(t, "weight_job_size", w.job_size, 0, ctx);
  Int(t, "weight_partition", w.partition, 0, ctx);
  Int(t, "weight_qos", w.qos, 0, ctx);
  Dur(t, "max_age", w.max_age, ctx);
  Bool(t, "favor_small", w.favor_small, ctx);
}

void PolicyReader::ReadFairshare(const toml::table& t, core::FairsharePolicy& f) {
  const std::string ctx = "[fairshare]";
  CheckKeys(t, {"algorithm", "half_life", "billing_weights", "charge"}, ctx);
  std::string charge;
  Str(t, "charge", charge, ctx);
  if (const toml::node* n = t.get("charge"); n && n->is_string()) {
    if (charge == "allocated") f.charge = core::FairsharePolicy::Charge::kAllocated;
    else if (charge == "busy") f.charge = core::FairsharePolicy::Charge::kBusy;
    else Error(n->source(), "'charge' in [fairshare]: expected \"allocated\" or \"busy\", got \"" + charge.substr(0, 64) + "\"");
  }
  std::string alg;
  Str(t, "algorithm", alg, ctx);
  if (!alg.empty()) {
    if (auto a = core::ParseFairshareAlgorithm(alg)) f.algorithm = *a;
    else Error(t.get("algorithm")->source(), "'algorithm' in [fairshare]: expected \"classic\" or \"fair-tree\", got \"" + alg + "\"");
  }
  Dur(t, "half_life", f.half_life, ctx);
  const toml::node* bw = t.get("billing_weights");
  if (!bw) return;
  const toml::table* weights = bw->as_table();
  if (!weights) return Error(bw->source(), "'billing_weights' in [fairshare]: expected a table");
  for (auto&& [key, value] : *weights) {
    const std::string k(key.str());
    if (k != "cpu" && k != "mem" && k != "gpu" && k.rfind("gpu:", 0) != 0) {
      Error(key.source(), "unknown billing resource '" + k + "'; expected cpu, mem, gpu or gpu:TYPE");
      continue;
    }
    auto v = value.value<double>();  // integers are accepted too
    if (!v || *v < 0) {
      Error(value.source(), "billing weight '" + k + "': expected a number >= 0");
      continue;
    }
    f.billing_weights[k] = *v;
  }
}

core::PartitionPolicy PolicyReader::ReadPartition(const toml::table& t, const std::string& ctx) {
  CheckKeys(t, {"name", "pools", "default_time_limit", "max_time_limit", "priority_tier",
                "max_tasks_per_job", "up", "allow_accounts", "allow_qos"},
            ctx);
  core::PartitionPolicy p;
  Str(t, "name", p.name, ctx);
  if (p.name.empty()) Error(t.source(), ctx + ": 'name' is required");
  StrList(t, "pools", p.pools, ctx);
  if (const toml::node* n = t.get("pools"))
    for (const std::string& pool : p.pools)
      if (!core::ParsePool(pool))
        Error(n->source(), ctx + ": unknown pool '" + pool + "'; expected on-demand, spot or reserved");
  Dur(t, "default_time_limit", p.default_time_limit, ctx);
  Dur(t, "max_time_limit", p.max_time_limit, ctx);
  if (p.default_time_limit > p.max_time_limit)
    Error(t.source(), ctx + ": default_time_limit exceeds max_time_limit");
  Int(t, "priority_tier", p.priority_tier, 0, ctx);
  Int32(t, "max_tasks_per_job", p.max_tasks_per_job, 0, ctx);
  Bool(t, "up", p.up, ctx);
  StrList(t, "allow_accounts", p.allow_accounts, ctx);  // names checked by CheckAssociations
  StrList(t, "allow_qos", p.allow_qos, ctx);
  KeepLines(t, {"allow_accounts", "allow_qos"}, p.source);
  return p;
}

core::QosPolicy PolicyReader::ReadQos(const toml::table& t, const std::string& ctx) {
  CheckKeys(t, {"name", "priority", "max_wall", "max_gpus_per_job", "max_gpus_per_user",
                "max_running_jobs_per_user", "preempt", "preempt_mode", "grace_time", "preempt_exempt_time",
                "max_preemptions"},
            ctx);
  core::QosPolicy q;
  Str(t, "name", q.name, ctx);
  if (q.name.empty()) Error(t.source(), ctx + ": 'name' is required");
  Int(t, "priority", q.priority, 0, ctx);
  Dur(t, "max_wall", q.max_wall, ctx);
  Int(t, "max_gpus_per_job", q.max_gpus_per_job, 0, ctx);
  Int(t, "max_gpus_per_user", q.max_gpus_per_user, 0, ctx);
  Int32(t, "max_running_jobs_per_user", q.max_running_jobs_per_user, 0, ctx);
  StrList(t, "preempt", q.preempt, ctx);
  std::string mode;
  Str(t, "preempt_mode", mode, ctx);
  if (!mode.empty()) {
    if (auto m = core::ParsePreemptMode(mode)) q.preempt_mode = *m;
    else Error(t.get("preempt_mode")->source(), "'preempt_mode' in " + ctx + ": expected \"requeue\" or \"cancel\", got \"" + mode + "\"");
  }
  Dur(t, "grace_time", q.grace_time, ctx);
  Dur(t, "preempt_exempt_time", q.preempt_exempt_time, ctx);
  Int32(t, "max_preemptions", q.max_preemptions, 0, ctx);
  return q;
}

core::AccountPolicy PolicyReader::ReadAccount(const toml::table& t, const std::string& ctx) {
  CheckKeys(t, {"name", "parent", "shares", "users", "max_gpus", "max_cpus", "max_running_jobs", "allow_qos"}, ctx);
  core::AccountPolicy a;
  Str(t, "name", a.name, ctx);
  if (a.name.empty()) Error(t.source(), ctx + ": 'name' is required");
  if (a.name.find('/') != std::string::npos) Error(t.get("name")->source(), ctx + ": account names may not contain '/'");
  Str(t, "parent", a.parent, ctx);
  Int(t, "shares", a.shares, 0, ctx);
  int64_t cpus = 0;
  Int(t, "max_cpus", cpus, 0, ctx);
  constexpr int64_t kMaxCpus = int64_t{1} << 40;  // cores; x 1000 millicores stays far from overflow
  if (cpus > kMaxCpus)
    Error(t.get("max_cpus")->source(), "'max_cpus' in " + ctx + ": must be <= " + std::to_string(kMaxCpus) + ", got " +
                                           std::to_string(cpus));
  else
    a.max_cpu_millis = cpus * 1000;
  Int(t, "max_gpus", a.max_gpus, 0, ctx);
  Int32(t, "max_running_jobs", a.max_running_jobs, 0, ctx);
  ReadAccountUsers(t, ctx, a);
  StrList(t, "allow_qos", a.allow_qos, ctx);
  KeepLines(t, {"users", "allow_qos"}, a.source);
  return a;
}

void PolicyReader::CheckReferences(const toml::table& root, const core::PolicySet& p) {
  const toml::source_region top = root.source();
  auto where = [&](const char* key) { const toml::node* n = root.get(key); return n ? n->source() : top; };
  std::set<std::string> names;
  for (const auto& part : p.partitions)
    if (!part.name.empty() && !names.insert(part.name).second)
      Error(where("partitions"), "duplicate partition '" + part.name + "'");
  if (!core::FindPartition(p, p.default_partition))
    Error(where("default_partition"), "default_partition '" + p.default_partition + "' is not a defined partition");
  names.clear();
  for (const auto& q : p.qos)
    if (!q.name.empty() && !names.insert(q.name).second) Error(where("qos"), "duplicate QoS '" + q.name + "'");
  for (const auto& q : p.qos) {
    for (const auto& v : q.preempt) {
      if (!names.count(v)) Error(where("qos"), "QoS '" + q.name + "': preempt names '" + v + "', which is not a defined QoS");
    }
  }
  // Preemption must be one-way: a QoS may not reach itself through preempt lists.
  std::map<std::string, std::vector<std::string>> preempts;
  for (const auto& q : p.qos) preempts[q.name] = q.preempt;
  for (const auto& q : p.qos) {
    std::set<std::string> seen;
    std::vector<std::string> stack(q.preempt.begin(), q.preempt.end());
    while (!stack.empty()) {
      std::string v = stack.back();
      stack.pop_back();
      if (v == q.name) {
        Error(where("qos"), "QoS '" + q.name + "' can preempt itself through its preempt list (preemption must be one-way)");
        break;
      }
      if (!seen.insert(v).second) continue;
      for (const auto& w : preempts[v]) stack.push_back(w);
    }
  }
  if (!p.qos.empty() && !names.count(p.default_qos))
    Error(where(root.get("default_qos") ? "default_qos" : "qos"), "default_qos '" + p.default_qos + "' is not a defined QoS");
  std::map<std::string, std::string> parent;
  for (const auto& a : p.accounts)
    if (!a.name.empty() && !parent.emplace(a.name, a.parent).second)
      Error(where("accounts"), "duplicate account '" + a.name + "'");
  for (const auto& a : p.accounts) {
    if (!a.parent.empty() && !parent.count(a.parent))
      Error(where("accounts"), "account '" + a.name + "': parent '" + a.parent + "' is not a defined account");
    std::set<std::string> seen{a.name};
    for (std::string up = a.parent; !up.empty() && parent.count(up); up = parent[up])
      if (!seen.insert(up).second) {
        Error(where("accounts"), "account '" + a.name + "': the parent chain loops back through '" + up + "'");
        break;
      }
  }
}

}  // namespace mlsched::policy
