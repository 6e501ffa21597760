#include "schedd/core/fit_index.h"

#include <algorithm>

namespace mlsched::core {

NowFitIndex::NowFitIndex(const NodeLedger& ledger, const std::vector<size_t>& eligible, int32_t type_id,
                         const TaskDemand& demand, int64_t ntasks)
    : type_id_(type_id), demand_(demand), ntasks_(ntasks), fit_(ledger.size(), -1) {
  for (size_t i : eligible) {
    const NodeSlot& slot = ledger.slot(i);
    if (demand_.gpus > 0 && slot.gpu_type_id != type_id_) continue;
    const size_t d = static_cast<size_t>(slot.domain_id);
    if (d >= by_domain_.size()) {
      by_domain_.resize(d + 1);
      domain_sum_.resize(d + 1, 0);
    }
    by_domain_[d].push_back(i);
    fit_[i] = Fit(ledger, i);
    domain_sum_[d] += fit_[i];
  }
}

int64_t NowFitIndex::Fit(const NodeLedger& ledger, size_t node) const {
  TaskDemand free = ledger.slot(node).free;
  free.gpus = ledger.FreeGpus(node);
  return TasksThatFit(free, demand_, ntasks_);
}

void NowFitIndex::Update(const NodeLedger& ledger, const std::vector<size_t>& touched) {
  for (; seen_ < touched.size(); ++seen_) {
    const size_t i = touched[seen_];
    if (fit_[i] < 0) continue;
    const int64_t now = Fit(ledger, i);
    domain_sum_[static_cast<size_t>(ledger.slot(i).domain_id)] += now - fit_[i];
    fit_[i] = now;
  }
}

std::optional<std::optional<NodeChoice>> NowFitIndex::Choose(const NodeLedger& ledger,
                                                             const AvailabilityTimeline& timeline,
                                                             Timestamp now, Timestamp to, Topology topology) {
  // Nodes with reservations after now may hold fewer tasks over the job's whole window.
  std::vector<int64_t> sums = domain_sum_;
  std::vector<std::pair<size_t, int64_t>> reduced;  // (node, tasks over the window)
  for (size_t v : timeline.FutureReservedNodes()) {
    if (v >= fit_.size() || fit_[v] <= 0) continue;
    const int64_t k = TasksThatFit(timeline.MinFree(v, now, to), demand_, fit_[v]);
    if (k == fit_[v]) continue;
    sums[static_cast<size_t>(ledger.slot(v).domain_id)] += k - fit_[v];
    reduced.emplace_back(v, k);
  }
  int64_t total = 0;
  int64_t single = -1;
  for (size_t d = 0; d < sums.size(); ++d) {
    total += sums[d];
    if (sums[d] >= ntasks_ && (single < 0 || sums[d] < sums[static_cast<size_t>(single)])) single = static_cast<int64_t>(d);
  }
  if (total < ntasks_) return std::optional<NodeChoice>{};  // nothing fits: ChooseNodes says nullopt too
  if (single < 0) return std::nullopt;                     // a gang over several domains: full scan
  std::vector<NodeCandidate> candidates;
  for (size_t i : by_domain_[static_cast<size_t>(single)]) {
    int64_t k = fit_[i];
    for (const auto& [node, tasks] : reduced)
      if (node == i) k = tasks;
    if (k <= 0) continue;
    const NodeSlot& slot = ledger.slot(i);
    candidates.push_back({i, k, slot.domain_id, slot.zone_id, slot.region_id, 0});
  }
  return ChooseNodes(candidates, ntasks_, topology);
}

}  // namespace mlsched::core
