// An incremental index of where one gang shape fits now, so that placing the many small jobs of a
// cycle does not rescan every node: tasks that fit per node (from the ledger), summed per topology
// domain, updated only for the nodes the cycle's starts touched.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "schedd/core/ledger.h"
#include "schedd/core/placement.h"
#include "schedd/core/timeline.h"

namespace mlsched::core {

/// Tasks of `demand` (at most `ntasks` per node) that fit now on each of `eligible` nodes of GPU
/// type `type_id` (-1: any, for jobs without GPUs), from the ledger's free resources and device
/// indices, with their sum per domain.
class NowFitIndex {
 public:
  NowFitIndex(const NodeLedger& ledger, const std::vector<size_t>& eligible, int32_t type_id,
              const TaskDemand& demand, int64_t ntasks);
  /// Re-reads the nodes listed in touched[seen..] (their ledger entries changed since).
  void Update(const NodeLedger& ledger, const std::vector<size_t>& touched);
  /// ChooseNodes' answer for a gang with topology kNone or kSameDomain starting now and running
  /// until `to`, when one domain can hold the whole gang: the tightest such domain (least total,
  /// lowest id), placed as ChooseInGroup places it. Nodes with future reservations are re-checked
  /// on `timeline` over [now, to). Returns an empty optional-in-optional when the answer needs the
  /// full scan (no single domain holds the gang); {nullopt} when nothing fits at all.
  std::optional<std::optional<NodeChoice>> Choose(const NodeLedger& ledger, const AvailabilityTimeline& timeline,
                                                  Timestamp now, Timestamp to, Topology topology);

 private:
  int64_t Fit(const NodeLedger& ledger, size_t node) const;
  int32_t type_id_;
  TaskDemand demand_;
  int64_t ntasks_;
  std::vector<int64_t> fit_;                    // per ledger node; -1 = not in the index
  std::vector<int64_t> domain_sum_;             // per domain id
  std::vector<std::vector<size_t>> by_domain_;  // eligible nodes per domain, in index order
  size_t seen_ = 0;                             // entries of `touched` already applied
};

}  // namespace mlsched::core
