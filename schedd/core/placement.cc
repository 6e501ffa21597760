#include "schedd/core/placement.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace mlsched::core {
namespace {

int32_t GroupKey(const NodeCandidate& c, Topology topology) {
  switch (topology) {
    case Topology::kSameDomain: return c.domain;
    case Topology::kSameZone: return c.zone;
    case Topology::kSameRegion: return c.region;
    default: return 0;
  }
}

// Picks `quota` tasks from `nodes` in the order (tasks desc, tiebreak asc, node asc): the largest
// nodes while none holds the remainder, then the tightest node that does. When one node can hold
// the whole quota (most gangs) that node is found in one pass, without sorting.
void FillFromNodes(const std::vector<NodeCandidate>& candidates, int64_t quota, NodeChoice& out) {
  if (quota <= 0) return;
  const NodeCandidate* tight = nullptr;  // fewest tasks >= quota, then lowest tiebreak, then node
  for (const NodeCandidate& c : candidates)
    if (c.tasks >= quota &&
        (!tight || std::tie(c.tasks, c.tiebreak, c.node) < std::tie(tight->tasks, tight->tiebreak, tight->node)))
      tight = &c;
  if (tight) {
    out.emplace_back(tight->node, quota);
    return;
  }
  std::vector<NodeCandidate> nodes;
  for (const NodeCandidate& c : candidates)
    if (c.tasks > 0) nodes.push_back(c);
  std::sort(nodes.begin(), nodes.end(), [](const NodeCandidate& a, const NodeCandidate& b) {
    if (a.tasks != b.tasks) return a.tasks > b.tasks;
    return a.tiebreak != b.tiebreak ? a.tiebreak < b.tiebreak : a.node < b.node;
  });
  size_t front = 0;
  while (quota > 0 && front < nodes.size()) {
    if (nodes[front].tasks < quota) {
      out.emplace_back(nodes[front].node, nodes[front].tasks);
      quota -= nodes[front].tasks;
      ++front;
      continue;
    }
    // Smallest task count >= quota among nodes[front..]; its first occurrence has the best tiebreak.
    auto last_ge = std::partition_point(nodes.begin() + front, nodes.end(),
                                        [quota](const NodeCandidate& c) { return c.tasks >= quota; });
    int64_t best = (last_ge - 1)->tasks;
    auto first_best = std::partition_point(nodes.begin() + front, last_ge,
                                           [best](const NodeCandidate& c) { return c.tasks > best; });
    out.emplace_back(first_best->node, quota);
    quota = 0;
  }
}

NodeChoice SpreadOverDomains(std::vector<NodeCandidate> nodes, int64_t ntasks) {
  std::map<int32_t, std::vector<NodeCandidate>> by_domain;
  for (const auto& c : nodes) by_domain[c.domain].push_back(c);
  std::vector<std::vector<NodeCandidate>*> queues;
  for (auto& [d, v] : by_domain) {
    std::sort(v.begin(), v.end(), [](const NodeCandidate& a, const NodeCandidate& b) {
      return a.tiebreak != b.tiebreak ? a.tiebreak < b.tiebreak : a.node < b.node;
    });
    queues.push_back(&v);
  }
  NodeChoice out;
  std::vector<size_t> pos(queues.size(), 0);
  while (static_cast<int64_t>(out.size()) < ntasks) {
    for (size_t q = 0; q < queues.size() && static_cast<int64_t>(out.size()) < ntasks; ++q)
      if (pos[q] < queues[q]->size()) out.emplace_back((*queues[q])[pos[q]++].node, 1);
  }
  return out;
}

// Fewest domains, then fewest nodes inside them. Only the chosen domains' nodes are sorted. The
// nodes' tasks must sum to at least `ntasks` (ChooseNodes checks).
NodeChoice ChooseInGroup(const std::vector<NodeCandidate>& nodes, int64_t ntasks) {
  int32_t max_domain = 0;
  for (const auto& c : nodes) max_domain = std::max(max_domain, c.domain);
  if (max_domain == 0) {  // one domain (a flat fleet, an SWF machine): nothing to group
    NodeChoice out;
    FillFromNodes(nodes, ntasks, out);
    return out;
  }
  std::vector<int64_t> domain_sum(static_cast<size_t>(max_domain) + 1, 0);
  for (const auto& c : nodes)
    if (c.tasks > 0) domain_sum[c.domain] += c.tasks;
  // Most gangs fit in one domain: take the tightest such domain without sorting them all.
  int32_t single = -1;
  for (int32_t d = 0; d <= max_domain; ++d)
    if (domain_sum[d] >= ntasks && (single < 0 || domain_sum[d] < domain_sum[single])) single = d;
  std::vector<std::pair<int64_t, int32_t>> domains;  // (sum, domain), sum desc then id asc
  if (single >= 0) {
    domains.emplace_back(domain_sum[single], single);
  } else {
    for (int32_t d = 0; d <= max_domain; ++d)
      if (domain_sum[d] > 0) domains.emplace_back(domain_sum[d], d);
  }
  std::sort(domains.begin(), domains.end(), [](auto a, auto b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<int64_t> quota(domain_sum.size(), 0);
  std::vector<int32_t> order;  // chosen domains in pick order
  int64_t remaining = ntasks;
  size_t front = 0;
  while (remaining > 0 && front < domains.size()) {
    if (domains[front].first < remaining) {
      quota[domains[front].second] = domains[front].first;
      order.push_back(domains[front].second);
      remaining -= domains[front].first;
      ++front;
      continue;
    }
    size_t pick = front;
    for (size_t k = front; k < domains.size() && domains[k].first >= remaining; ++k) pick = k;
    // Among equal sums prefer the lowest domain id (first in the sorted run).
    while (pick > front && domains[pick - 1].first == domains[pick].first) --pick;
    quota[domains[pick].second] = remaining;
    order.push_back(domains[pick].second);
    remaining = 0;
  }
  // Nodes of the chosen domains, grouped in pick order.
  std::vector<int32_t> rank(domain_sum.size(), -1);
  for (size_t k = 0; k < order.size(); ++k) rank[order[k]] = static_cast<int32_t>(k);
  std::vector<std::vector<NodeCandidate>> segments(order.size());
  for (const auto& c : nodes)
    if (c.tasks > 0 && rank[c.domain] >= 0) segments[static_cast<size_t>(rank[c.domain])].push_back(c);
  NodeChoice out;
  for (size_t k = 0; k < order.size(); ++k) FillFromNodes(segments[k], quota[order[k]], out);
  return out;
}

}  // namespace

std::optional<NodeChoice> ChooseNodes(const std::vector<NodeCandidate>& candidates, int64_t ntasks,
                                      Topology topology) {
  if (ntasks <= 0) return NodeChoice{};
  if (topology == Topology::kSpread) {
    std::vector<NodeCandidate> capped;
    for (NodeCandidate c : candidates)
      if (c.tasks > 0) {
        c.tasks = 1;
        capped.push_back(c);
      }
    if (static_cast<int64_t>(capped.size()) < ntasks) return std::nullopt;
    return SpreadOverDomains(std::move(capped), ntasks);
  }
  int32_t max_key = 0;
  for (const auto& c : candidates) max_key = std::max(max_key, GroupKey(c, topology));
  if (max_key == 0) {  // one group (a flat fleet, an SWF machine): its sum decides, no tally needed
    int64_t sum = 0;
    for (const auto& c : candidates)
      if (c.tasks > 0) sum += c.tasks;
    if (sum < ntasks) return std::nullopt;
    return ChooseInGroup(candidates, ntasks);
  }
  std::vector<int64_t> group_sum(static_cast<size_t>(max_key) + 1, 0);
  for (const auto& c : candidates)
    if (c.tasks > 0) group_sum[GroupKey(c, topology)] += c.tasks;
  std::optional<std::pair<int64_t, int32_t>> best;  // (sum, key): least spare capacity wins
  for (int32_t key = 0; key <= max_key; ++key)
    if (group_sum[key] >= ntasks && (!best || group_sum[key] < best->first)) best = {group_sum[key], key};
  if (!best) return std::nullopt;
  std::vector<NodeCandidate> group;
  for (const auto& c : candidates)
    if (c.tasks > 0 && GroupKey(c, topology) == best->second) group.push_back(c);
  return ChooseInGroup(group, ntasks);
}

bool NodeEligible(const NodeSlot& slot, const JobSpec& spec, const PartitionPolicy* partition) {
  const Node& node = *slot.node;
  if (node.health != NodeHealth::kUp) return false;
  if (partition && !partition->pools.empty() &&
      std::find(partition->pools.begin(), partition->pools.end(), PoolName(node.pool)) ==
          partition->pools.end())
    return false;
  for (const std::string& f : spec.features)
    if (std::find(node.features.begin(), node.features.end(), f) == node.features.end())
      return false;
  if (!spec.exclude_nodes.empty() &&
      std::find(spec.exclude_nodes.begin(), spec.exclude_nodes.end(), node.name) != spec.exclude_nodes.end())
    return false;
  if (spec.spot == SpotPreference::kNever && node.pool == Pool::kSpot) return false;
  if (spec.spot == SpotPreference::kOnly && node.pool != Pool::kSpot) return false;
  if (spec.region_strict && !spec.data_region.empty() && node.region != spec.data_region) return false;
  return ResolveTaskDemand(spec, node).has_value();
}

std::vector<std::string> GpuTypeChoices(const NodeLedger& ledger, const JobSpec& spec,
                                        const TaskDemand& demand) {
  if (demand.gpus <= 0) return {""};
  if (!spec.gpu_types.empty()) return spec.gpu_types;
  for (const auto& [type, count] : spec.per_task.gpus)
    if (count > 0 && !type.empty()) return {type};
  return ledger.gpu_types();
}

bool PlaceGangNow(AllocationTxn& txn, const NodeLedger& ledger, const std::vector<size_t>& eligible,
                  const JobSpec& spec, const TaskDemand& demand) {
  for (const std::string& type : GpuTypeChoices(ledger, spec, demand)) {
    std::vector<NodeCandidate> candidates;
    candidates.reserve(eligible.size());
    for (size_t i : eligible) {
      const NodeSlot& s = ledger.slot(i);
      if (demand.gpus > 0 && s.gpu_type != type) continue;
      TaskDemand free = s.free;
      free.gpus = ledger.FreeGpus(i);
      int64_t k = TasksThatFit(free, demand, spec.ntasks);
      if (k > 0) candidates.push_back({i, k, s.domain_id, s.zone_id, s.region_id, 0});
    }
    auto choice = ChooseNodes(candidates, spec.ntasks, spec.topology);
    if (!choice) continue;
    return TakeChoice(txn, *choice, demand);
  }
  return false;
}

bool TakeChoice(AllocationTxn& txn, const NodeChoice& choice, const TaskDemand& demand) {
  int32_t rank = 0;
  for (auto [node, count] : choice)
    for (int64_t t = 0; t < count; ++t)
      if (!txn.Take(node, demand, rank++)) {
        txn.Discard();
        return false;
      }
  return true;
}

}  // namespace mlsched::core
