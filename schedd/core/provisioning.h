// Elastic capacity (issue 16 point 4): which nodes each provisioned pool should request, release
// or give up on, after a scheduling cycle. Slurm power saving's design (ResumeProgram,
// SuspendProgram, SuspendTime, ResumeTimeout) made a pure function: the caller keeps the ledger of
// the nodes it created, runs the programs and records the events.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// Most nodes one pool may be configured to create (ProvisioningPolicy::max_nodes).
inline constexpr int32_t kMaxProvisionedNodes = 4096;
/// Most pending jobs PlanProvisioning sizes demand for in one call (queue order, the rest wait).
inline constexpr size_t kMaxProvisionDemandJobs = 10000;

/// A node the provisioner created: requested (resume program run, agent not registered yet) or
/// registered (its agent is in ClusterState::nodes).
struct ProvisionedNode {
  std::string name;
  Pool pool = Pool::kOnDemand;
  bool registered = false;
  Timestamp requested_at = 0;  // when the resume program was asked for it
  Timestamp idle_since = 0;    // registered: since when it runs no task; 0 = busy (or not known yet,
                               // e.g. after a restart)
  bool operator==(const ProvisionedNode&) const = default;
};

/// What the provisioner remembers between calls: its nodes and the next name index per pool
/// ("<pool>-p<N>": N only grows, so a name is never reused while schedd runs).
struct ProvisionLedger {
  std::vector<ProvisionedNode> nodes;
  std::map<Pool, int64_t> next_index;
  bool operator==(const ProvisionLedger&) const = default;
};

/// Ask `pool`'s resume program for `nodes` (new names) for the pending `jobs` that wait for them.
struct ProvisionRequest {
  Pool pool = Pool::kOnDemand;
  std::vector<std::string> nodes;
  std::vector<JobId> jobs;       // jobs whose demand this covers: pending ones waiting for nodes,
                                 // running elastic ones below their largest size
  double cost_per_hour = 0;      // of these nodes, [pricing.POOL] units
  std::string detail;            // "2 nodes needed for 1 job(s), 0 requested; max_nodes 2"
};

/// Run `pool`'s suspend program for `node`: idle past idle_time, down or drained with no task, or
/// (failed = true) not registered within resume_timeout.
struct ProvisionRelease {
  Pool pool = Pool::kOnDemand;
  std::string node;
  bool failed = false;
  std::string reason;            // "idle 300 s (idle_time 300 s)", "did not register within 60 s"
};

/// The decisions of one call and the ledger to keep for the next.
struct ProvisioningPlan {
  std::vector<ProvisionRequest> resume;   // at most one per pool
  std::vector<ProvisionRelease> suspend;  // released (idle, down) and failed nodes
  ProvisionLedger ledger;
  std::map<Pool, double> cost_per_hour;   // of each provisioned pool's nodes after this plan
};

/// Cost per hour of one node of `shape` in its pool: cores x cpu_hour + GPUs x gpu_hour of its
/// GPU type (else the pool's "" price), from policy.placement.pricing; 0 for an unpriced pool.
double NodeCostPerHour(const Node& shape, const PolicySet& policy);

/// Nodes of `shape` that `spec` needs at its largest size (tasks per node from the shape's
/// capacity), or 0 when no task of it fits the shape: wrong pool for its partition or spot
/// preference at `now`, missing features, region, GPU type or too small a node.
int64_t NodesNeeded(const Job& job, const Node& shape, const PolicySet& policy, Timestamp now);

/// Most copies of one pool's node shape AppendProvisionable adds (a gang wider than this many
/// created nodes is judged on this many).
inline constexpr int32_t kMaxFeasibilityShapes = 256;

/// Appends to `nodes` the nodes each provisioned pool could create (min(max_nodes,
/// kMaxFeasibilityShapes) copies of its shape, named "POOL-p*N"), so that submit-time feasibility
/// (CheckJobFeasible) accepts a job only such nodes could run.
void AppendProvisionable(const PolicySet& policy, std::vector<Node>& nodes);

/// One provisioning step after `cycle` ran on `state`, for every pool in policy.provisioning:
/// - a requested node that is in state.nodes becomes registered; one still missing after
///   resume_timeout is released as failed (no longer counted: its demand may be requested again);
/// - a registered node records when it became idle (no running task in `state`, and not among
///   cycle.starts); idle for idle_time, drained with no task, or down with no task for
///   resume_timeout (it may be reconnecting), it is released;
/// - demand: the pending jobs of `cycle.pending` that wait for nodes (reason Resources, Priority:
///   queued behind a job waiting for resources, or WaitingForSpotBudget) whose tasks fit the
///   pool's shape need NodesNeeded nodes each (each job counts for one pool: the one whose nodes for
///   it cost least, the first in policy.provisioning on a tie); the pool asks for that total minus its requested nodes and
///   its idle registered ones, capped by max_nodes (requested + registered) and by
///   max_cost_per_hour (NodeCostPerHour x nodes held). When jobs grow (policy.elastic.grow), a
///   running elastic job below its largest size (not being stopped, not resized by `cycle`, whose
///   grow to its largest size would beat its restart cost as in PlanGrows; at most
///   kMaxGrowCandidates) is demand too, for the tasks it lacks beyond what free nodes hold now
///   (created nodes already requested or idle are the pool's supply instead): so a gang shrunk by an eviction gets its replacement node (the cheapest pool first:
///   spot before on-demand while its spot budget allows) and PlanGrows grows it onto that node once
///   min_resize_interval has passed. Keep idle_time above min_resize_interval plus a restart
///   (checkpoint, exit, relaunch), or the replacement may be released idle before the grow. New names are "<pool>-p<N>" from the
///   ledger's index, skipping names in state.nodes.
/// Nodes a pool no longer configures are released once idle. Pure and deterministic.
ProvisioningPlan PlanProvisioning(const ClusterState& state, const CyclePlan& cycle, const PolicySet& policy,
                                  const ProvisionLedger& ledger, Timestamp now);

}  // namespace mlsched::core
