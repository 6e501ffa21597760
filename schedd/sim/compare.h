// mlsim --compare: several policy files replayed on one trace with the same options, side by side
// (one table, one JSON array, one SVG of their wait distributions), so that an admin can see what a
// policy change does before applying it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "schedd/sim/metrics.h"
#include "schedd/sim/sim_config.h"

namespace mlsched::sim {

/// One policy's replay.
struct CompareRow {
  std::string name;            // the policy file's name without directory and .toml
  std::string path;            // the policy file as given
  std::string description;     // RunInfo::policy, e.g. "multifactor+easy(shortest-first)"
  Metrics metrics;
  std::vector<double> waits_s; // first start - submit of every finished job, seconds, ascending
};

/// Splits "a.toml,b.toml" at commas. Throws std::invalid_argument naming the list when it has an
/// empty item or fewer than two items.
std::vector<std::string> SplitPolicyList(const std::string& list);

/// Replays `base` once per policy file (base.policy_path replaced; every other option shared), in
/// the given order. Throws std::runtime_error prefixed with the policy file when a replay fails.
std::vector<CompareRow> RunCompare(const SimConfig& base, const std::vector<std::string>& policies);

/// One header line naming the trace, then one row per policy: mean/p95/max wait (s), mean and max
/// bounded slowdown, utilization (0-1), Jain's index over accounts, finished jobs.
void WriteCompareTable(std::ostream& out, const std::string& trace,
                       const std::vector<CompareRow>& rows);

/// {"trace": ..., "policies": [{"name", "path", "policy", "jobs", "finished", "mean_wait_s",
/// "p95_wait_s", "max_wait_s", "mean_bounded_slowdown", "max_bounded_slowdown", "utilization",
/// "jain_fairness"}, ...]} in row order.
void WriteCompareJson(std::ostream& out, const std::string& trace,
                      const std::vector<CompareRow>& rows);

/// A standalone SVG: the cumulative distribution of wait per policy (x: wait on a log scale from
/// 1 s, waits under 1 s at the left edge; y: share of finished jobs waiting at most x), one
/// <polyline id="policy-N"> per row (N = row index) with a legend. Same rows -> same bytes.
void WriteCompareSvg(std::ostream& out, const std::string& title,
                     const std::vector<CompareRow>& rows);

}  // namespace mlsched::sim
