#include "schedd/core/fairshare.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

namespace mlsched::core {

std::string UsageKey(const std::string& account, const std::string& user) {
  return account + "/" + user;
}

double BillingRate(const JobSpec& spec, const FairsharePolicy& policy) {
  auto weight = [&](const std::string& key, double fallback) {
    auto it = policy.billing_weights.find(key);
    return it == policy.billing_weights.end() ? fallback : it->second;
  };
  const bool empty = policy.billing_weights.empty();
  double per_task = spec.per_task.cpu_millis / 1000.0 * weight("cpu", empty ? 1.0 : 0.0) +
                    spec.per_task.memory_bytes / double(int64_t{1} << 30) * weight("mem", 0.0);
  for (const auto& [type, count] : spec.per_task.gpus) {
    double w = type.empty() ? weight("gpu", 0.0) : weight("gpu:" + type, weight("gpu", 0.0));
    // A job that accepts several types is charged at its first preference.
    if (type.empty() && !spec.gpu_types.empty())
      w = weight("gpu:" + spec.gpu_types.front(), weight("gpu", 0.0));
    per_task += count * w;
  }
  return per_task * spec.ntasks;
}

void AccrueUsage(std::map<std::string, double>& usage, const std::vector<Job>& jobs,
                 const FairsharePolicy& policy, Timestamp from, Timestamp to) {
  if (to < from) return;
  if (policy.half_life > 0) {
    const double decay = std::exp2(-double(to - from) / double(policy.half_life));
    for (auto& [key, value] : usage) value *= decay;
  }
  for (const Job& job : jobs) {
    if (job.state != JobState::kRunning && job.state != JobState::kCompleting) continue;
    const Timestamp begin = std::max(from, job.start_time);
    if (to <= begin) continue;
    usage[UsageKey(job.spec.account, job.spec.user)] += BillingRate(job.spec, policy) * double(to - begin);
  }
}

namespace {

struct TreeNode {
  std::string key, parent;
  int64_t shares = 1;
  bool user = false;
  double usage = 0;  // own usage, then the subtree's
  std::vector<size_t> children;
};

}  // namespace

FairshareTree::FairshareTree(const PolicySet& policy, const std::map<std::string, double>& usage,
                             const std::vector<Job>& jobs) {
  std::vector<TreeNode> nodes(1);  // nodes[0] is the root
  std::map<std::string, size_t> index{{"", 0}};
  auto account_node = [&](const std::string& name) -> size_t {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    index[name] = nodes.size();
    nodes.push_back({name, "", 1, false, 0, {}});
    return nodes.size() - 1;
  };
  for (const AccountPolicy& a : policy.accounts) nodes[account_node(a.name)].shares = a.shares;
  for (const AccountPolicy& a : policy.accounts) {
    // A parent that is unknown, or a cycle back to the account itself, leaves it at the top level.
    bool known = !a.parent.empty() && index.count(a.parent) && a.parent != a.name;
    nodes[index[a.name]].parent = known ? a.parent : "";
  }
  auto user_node = [&](const std::string& account, const std::string& user) -> size_t {
    std::string key = UsageKey(account, user);
    auto it = index.find(key);
    if (it != index.end()) return it->second;
    account_node(account);
    int64_t shares = 1;
    for (const AccountPolicy& a : policy.accounts)
      if (a.name == account && a.user_shares.count(user)) shares = a.user_shares.at(user);
    index[key] = nodes.size();
    nodes.push_back({key, account, shares, true, 0, {}});
    return nodes.size() - 1;
  };
  for (const AccountPolicy& a : policy.accounts)
    for (const auto& [user, s] : a.user_shares) user_node(a.name, user);
  for (const Job& j : jobs)
    if (!IsFinal(j.state)) user_node(j.spec.account, j.spec.user);
  for (const auto& [key, value] : usage) {
    size_t slash = key.find('/');
    size_t n = slash == std::string::npos ? account_node(key)
                                          : user_node(key.substr(0, slash), key.substr(slash + 1));
    nodes[n].usage += value;
  }
  // Link children, detecting parent cycles: walk up; a cycle re-parents to the root.
  for (size_t n = 1; n < nodes.size(); ++n) {
    std::set<size_t> seen{n};
    for (size_t p = index[nodes[n].parent]; p != 0; p = index[nodes[p].parent])
      if (!seen.insert(p).second) { nodes[n].parent = ""; break; }
    nodes[index[nodes[n].parent]].children.push_back(n);
  }
  for (TreeNode& t : nodes)
    std::sort(t.children.begin(), t.children.end(),
              [&](size_t a, size_t b) { return nodes[a].key < nodes[b].key; });
  std::function<double(size_t)> sum_usage = [&](size_t n) {
    for (size_t c : nodes[n].children) nodes[n].usage += sum_usage(c);
    return nodes[n].usage;
  };
  const double total = sum_usage(0);
  size_t user_count = 0;
  for (const TreeNode& t : nodes) user_count += t.user;

  // Walk depth first, siblings in name order (classic) or by level fairshare (Fair Tree).
  size_t visited_users = 0;
  double last_rank = 0, last_lf = -1;
  std::function<void(size_t, double, double, bool)> walk = [&](size_t n, double s_parent,
                                                               double ue_parent, bool) {
    const TreeNode& t = nodes[n];
    double sibling_shares = 0, sibling_usage = 0;
    for (size_t c : t.children) sibling_shares += double(nodes[c].shares), sibling_usage += nodes[c].usage;
    std::vector<std::pair<double, size_t>> order;  // (level fairshare, child)
    for (size_t c : t.children) {
      double s_level = sibling_shares > 0 ? double(nodes[c].shares) / sibling_shares : 0;
      double u_level = sibling_usage > 0 ? nodes[c].usage / sibling_usage : 0;
      double lf = s_level == 0 ? 0 : u_level == 0 ? std::numeric_limits<double>::infinity() : s_level / u_level;
      order.emplace_back(lf, c);
    }
    if (policy.fairshare.algorithm == FairshareAlgorithm::kFairTree)
      std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a.first > b.first; });
    bool first_user_in_group = true;
    for (auto [lf, c] : order) {
      const TreeNode& child = nodes[c];
      FairshareRow row;
      row.key = child.key;
      row.parent = child.parent;
      row.raw_shares = child.shares;
      double ratio = sibling_shares > 0 ? double(child.shares) / sibling_shares : 0;
      row.norm_shares = s_parent * ratio;
      row.raw_usage = child.usage;
      row.norm_usage = total > 0 ? child.usage / total : 0;
      row.effective_usage = row.norm_usage + (ue_parent - row.norm_usage) * ratio;
      row.level_fairshare = lf;
      if (child.user) {
        if (policy.fairshare.algorithm == FairshareAlgorithm::kClassic) {
          row.factor = row.norm_shares > 0 ? std::exp2(-row.effective_usage / row.norm_shares) : 0;
        } else {
          bool tie = !first_user_in_group && lf == last_lf;
          double rank = tie ? last_rank : double(user_count - visited_users);
          row.factor = user_count > 0 ? rank / double(user_count) : 1;
          last_rank = rank;
          last_lf = lf;
          first_user_in_group = false;
        }
        ++visited_users;
        factor_[child.key] = total > 0 ? row.factor : 1.0;
      }
      rows_.push_back(row);
      walk(c, row.norm_shares, row.effective_usage, child.user);
    }
  };
  walk(0, 1.0, total > 0 ? 1.0 : 0.0, false);
}

double FairshareTree::Factor(const std::string& account, const std::string& user) const {
  auto it = factor_.find(UsageKey(account, user));
  return it == factor_.end() ? 1.0 : it->second;
}

}  // namespace mlsched::core
