// PolicyReader: [health], what schedd does with a node whose agent reports a failing health check
// (core::HealthPolicy; agentd/health.h runs the checks, schedd's Controller drains), and
// [watchdog], when a gang counts as stalled or straggling (core::WatchdogPolicy; gang_watchdog.h).
#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

void PolicyReader::ReadHealth(const toml::table& t, core::HealthPolicy& p) {
  const std::string ctx = "[health]";
  CheckKeys(t, {"action", "auto_resume", "requeue_grace"}, ctx);
  std::string action;
  Str(t, "action", action, ctx);
  if (const toml::node* n = t.get("action")) {
    if (action == "drain") p.action = core::HealthPolicy::Action::kDrain;
    else if (action == "drain-and-requeue") p.action = core::HealthPolicy::Action::kDrainAndRequeue;
    else if (n->is_string())
      Error(n->source(), "'action' in [health]: \"" + action + "\" is not one of \"drain\", \"drain-and-requeue\"");
  }
  Bool(t, "auto_resume", p.auto_resume, ctx);
  Dur(t, "requeue_grace", p.requeue_grace, ctx);
  if (const toml::node* n = t.get("requeue_grace"); n && p.requeue_grace > 3600)
    Error(n->source(), "'requeue_grace' in [health]: at most 1h (a failing node should not hold a gang longer)");
  KeepLines(t, {"action", "auto_resume", "requeue_grace"}, p.source);
}

void PolicyReader::ReadWatchdog(const toml::table& t, core::WatchdogPolicy& p) {
  const std::string ctx = "[watchdog]";
  CheckKeys(t, {"stall_after", "straggler_ratio", "straggler_window", "drain_after", "suspect_window", "requeue_grace"}, ctx);
  Dur(t, "stall_after", p.stall_after, ctx);
  if (const toml::node* n = t.get("stall_after"); n && p.stall_after > 0 && p.stall_after < 10)
    Error(n->source(), "'stall_after' in [watchdog]: at least 10s (ranks report their step every few seconds), or 0 = off");
  Num(t, "straggler_ratio", p.straggler_ratio, ctx);
  if (const toml::node* n = t.get("straggler_ratio"); n && p.straggler_ratio >= 1)
    Error(n->source(), "'straggler_ratio' in [watchdog]: a fraction of the other nodes' median step rate, below 1 (0 = off)");
  Dur(t, "straggler_window", p.straggler_window, ctx);
  if (const toml::node* n = t.get("straggler_window"); n && p.straggler_window < 60)
    Error(n->source(), "'straggler_window' in [watchdog]: at least 60s");
  Int32(t, "drain_after", p.drain_after, 1, ctx);
  if (const toml::node* n = t.get("drain_after"); n && p.drain_after > 100)
    Error(n->source(), "'drain_after' in [watchdog]: at most 100 suspicions");
  Dur(t, "suspect_window", p.suspect_window, ctx);
  Dur(t, "requeue_grace", p.requeue_grace, ctx);
  if (const toml::node* n = t.get("requeue_grace"); n && p.requeue_grace > 3600)
    Error(n->source(), "'requeue_grace' in [watchdog]: at most 1h");
  KeepLines(t, {"stall_after", "straggler_ratio", "straggler_window", "drain_after", "suspect_window", "requeue_grace"}, p.source);
}

}  // namespace mlsched::policy
