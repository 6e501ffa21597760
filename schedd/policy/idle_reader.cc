// PolicyReader: [idle], the idle-GPU policy (core::IdlePolicy; schedd/server/idle_gpus.h): the
// default rule (gpu_util_below, after, action), exemptions, requeue_grace, and per-partition and
// per-QoS overrides ([idle.partitions.NAME], [idle.qos.NAME]) of any of the rule's keys.
#include "schedd/policy/policy_reader.h"

#include <algorithm>

namespace mlsched::policy {

namespace {

constexpr size_t kMaxOverrides = 256;  // [idle.partitions.*] + [idle.qos.*]

}  // namespace

void PolicyReader::ReadIdleRule(const toml::table& t, core::IdleRule& r, const std::string& ctx) {
  Num(t, "gpu_util_below", r.gpu_util_below, ctx);
  if (const toml::node* n = t.get("gpu_util_below"); n && r.gpu_util_below > 100)
    Error(n->source(), "'gpu_util_below' in " + ctx + ": a percentage, 0..100 (0 = off)");
  Dur(t, "after", r.after, ctx);
  if (const toml::node* n = t.get("after"); n && r.after < 10)
    Error(n->source(), "'after' in " + ctx + ": at least 10s (its agents sample the GPUs every few seconds)");
  std::string action;
  Str(t, "action", action, ctx);
  if (const toml::node* n = t.get("action"); n && n->is_string()) {
    if (action == "notify") r.action = core::IdleRule::Action::kNotify;
    else if (action == "requeue") r.action = core::IdleRule::Action::kRequeue;
    else if (action == "cancel") r.action = core::IdleRule::Action::kCancel;
    else Error(n->source(), "'action' in " + ctx + ": \"" + action.substr(0, 64) + "\" is not one of \"notify\", \"requeue\", \"cancel\"");
  }
}

void PolicyReader::ReadIdle(const toml::table& t, core::IdlePolicy& p) {
  const std::string ctx = "[idle]";
  CheckKeys(t, {"gpu_util_below", "after", "action", "exempt_accounts", "exempt_users", "exempt_qos", "requeue_grace",
                "partitions", "qos"},
            ctx);
  ReadIdleRule(t, p.rule, ctx);
  StrList(t, "exempt_accounts", p.exempt_accounts, ctx);
  StrList(t, "exempt_users", p.exempt_users, ctx);
  StrList(t, "exempt_qos", p.exempt_qos, ctx);
  Dur(t, "requeue_grace", p.requeue_grace, ctx);
  if (const toml::node* n = t.get("requeue_grace"); n && p.requeue_grace > 3600)
    Error(n->source(), "'requeue_grace' in [idle]: at most 1h");
  size_t overrides = 0;
  for (const char* kind : {"partitions", "qos"}) {
    const toml::node* n = t.get(kind);
    if (!n) continue;
    const toml::table* tables = n->as_table();
    if (!tables) {
      Error(n->source(), std::string("'") + kind + "' in [idle]: expected tables ([idle." + kind + ".NAME])");
      continue;
    }
    auto& out = std::string(kind) == "qos" ? p.qos : p.partitions;
    for (auto&& [name, value] : *tables) {
      const std::string sub = "[idle." + std::string(kind) + "." + std::string(name.str()) + "]";
      const toml::table* rule = value.as_table();
      if (!rule) {
        Error(value.source(), sub + ": expected a table");
        continue;
      }
      if (++overrides > kMaxOverrides) {
        Error(value.source(), sub + ": more than " + std::to_string(kMaxOverrides) + " [idle] overrides");
        break;
      }
      CheckKeys(*rule, {"gpu_util_below", "after", "action"}, sub);
      core::IdleRule r = p.rule;  // the keys it leaves out are [idle]'s
      ReadIdleRule(*rule, r, sub);
      out[std::string(name.str())] = r;
    }
  }
  KeepLines(t, {"gpu_util_below", "after", "action", "exempt_accounts", "exempt_users", "exempt_qos", "requeue_grace"}, p.source);
}

void PolicyReader::CheckIdle(const toml::table& root, const core::PolicySet& p) {
  const toml::table* t = root.get("idle") ? root.get("idle")->as_table() : nullptr;
  if (!t) return;
  auto is_qos = [&](const std::string& name) {
    return std::any_of(p.qos.begin(), p.qos.end(), [&](const core::QosPolicy& q) { return q.name == name; });
  };
  if (const toml::table* parts = t->get("partitions") ? t->get("partitions")->as_table() : nullptr)
    for (auto&& [name, value] : *parts)
      if (!core::FindPartition(p, std::string(name.str())))
        Error(value.source(), "[idle.partitions." + std::string(name.str()) + "]: '" + std::string(name.str()) +
                                  "' is not a defined partition");
  if (const toml::table* qos = t->get("qos") ? t->get("qos")->as_table() : nullptr)
    for (auto&& [name, value] : *qos)
      if (!is_qos(std::string(name.str())))
        Error(value.source(), "[idle.qos." + std::string(name.str()) + "]: '" + std::string(name.str()) + "' is not a defined QoS");
  for (const auto& name : p.idle.exempt_qos)
    if (!is_qos(name)) Error(t->get("exempt_qos")->source(), "[idle] exempt_qos names '" + name + "', which is not a defined QoS");
}

}  // namespace mlsched::policy
