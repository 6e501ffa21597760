#include "schedd/core/fairshare.h"

#include <algorithm>
#include <cmath>
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

double RunningBillingRate(const Job& job, const FairsharePolicy& policy) {
  const int32_t running = RunningTasks(job);
  const bool busy = policy.charge == FairsharePolicy::Charge::kBusy && job.gpu_busy_fraction >= 0;
  if (running == job.spec.ntasks && !busy) return BillingRate(job.spec, policy);
  JobSpec at_size = job.spec;
  at_size.ntasks = running;
  const double all = BillingRate(at_size, policy);
  if (!busy) return all;
  // The GPU part charged at its measured utilization; CPU and memory as allocated.
  JobSpec no_gpus = at_size;
  no_gpus.per_task.gpus.clear();
  const double rest = BillingRate(no_gpus, policy);
  return rest + (all - rest) * std::clamp(job.gpu_busy_fraction, 0.0, 1.0);
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
    usage[UsageKey(job.spec.account, job.spec.user)] += RunningBillingRate(job, policy) * double(to - begin);
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

// The association tree: nodes[0] is the root; accounts from the policy, the jobs and the usage;
// users as leaves "account/user".
struct Tree {
  std::vector<TreeNode> nodes{TreeNode{}};
  std::map<std::string, size_t> index{{"", 0}};
  const PolicySet* policy = nullptr;

  size_t Account(const std::string& name) {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    index[name] = nodes.size();
    nodes.push_back({name, "", 1, false, 0, {}});
    return nodes.size() - 1;
  }
  size_t User(const std::string& account, const std::string& user) {
    std::string key = UsageKey(account, user);
    auto it = index.find(key);
    if (it != index.end()) return it->second;
    Account(account);
    int64_t shares = 1;
    for (const AccountPolicy& a : policy->accounts)
      if (a.name == account && a.user_shares.count(user)) shares = a.user_shares.at(user);
    index[key] = nodes.size();
    nodes.push_back({key, account, shares, true, 0, {}});
    return nodes.size() - 1;
  }
  // Links children (a parent cycle re-parents to the root), sorts siblings by name and sums
  // subtree usage; returns the total.
  double Link() {
    for (size_t n = 1; n < nodes.size(); ++n) {
      std::set<size_t> seen{n};
      for (size_t p = index[nodes[n].parent]; p != 0; p = index[nodes[p].parent])
        if (!seen.insert(p).second) { nodes[n].parent = ""; break; }
      nodes[index[nodes[n].parent]].children.push_back(n);
    }
    for (TreeNode& t : nodes)
      std::sort(t.children.begin(), t.children.end(),
                [&](size_t a, size_t b) { return nodes[a].key < nodes[b].key; });
    return SumUsage(0);
  }
  double SumUsage(size_t n) {
    for (size_t c : nodes[n].children) nodes[n].usage += SumUsage(c);
    return nodes[n].usage;
  }
};

Tree BuildTree(const PolicySet& policy, const std::map<std::string, double>& usage,
               const std::vector<Job>& jobs) {
  Tree tree;
  tree.policy = &policy;
  for (const AccountPolicy& a : policy.accounts) tree.nodes[tree.Account(a.name)].shares = a.shares;
  for (const AccountPolicy& a : policy.accounts) {
    // An unknown parent, or the account itself, leaves it at the top level.
    bool known = !a.parent.empty() && tree.index.count(a.parent) && a.parent != a.name;
    tree.nodes[tree.index[a.name]].parent = known ? a.parent : "";
  }
  for (const AccountPolicy& a : policy.accounts)
    for (const auto& [user, s] : a.user_shares) tree.User(a.name, user);
  for (const Job& j : jobs)
    if (!IsFinal(j.state)) tree.User(j.spec.account, j.spec.user);
  for (const auto& [key, value] : usage) {
    size_t slash = key.find('/');
    size_t n = slash == std::string::npos ? tree.Account(key)
                                          : tree.User(key.substr(0, slash), key.substr(slash + 1));
    tree.nodes[n].usage += value;
  }
  return tree;
}

}  // namespace

// Depth-first walk computing every row; siblings in name order (classic) or by level fairshare
// (Fair Tree).
class FairshareTree::Walker {
 public:
  Walker(FairshareTree& out, const Tree& tree, double total, FairshareAlgorithm algorithm)
      : out_(out), tree_(tree), total_(total), algorithm_(algorithm) {
    for (const TreeNode& t : tree.nodes) user_count_ += t.user;
  }

  void Walk(size_t n, double s_parent, double ue_parent) {
    const TreeNode& t = tree_.nodes[n];
    double sibling_shares = 0, sibling_usage = 0;
    for (size_t c : t.children) {
      sibling_shares += double(tree_.nodes[c].shares);
      sibling_usage += tree_.nodes[c].usage;
    }
    std::vector<std::pair<double, size_t>> order;  // (level fairshare, child)
    for (size_t c : t.children) {
      double s_level = sibling_shares > 0 ? double(tree_.nodes[c].shares) / sibling_shares : 0;
      double u_level = sibling_usage > 0 ? tree_.nodes[c].usage / sibling_usage : 0;
      double lf = s_level == 0   ? 0
                  : u_level == 0 ? std::numeric_limits<double>::infinity()
                                 : s_level / u_level;
      order.emplace_back(lf, c);
    }
    if (algorithm_ == FairshareAlgorithm::kFairTree)
      std::stable_sort(order.begin(), order.end(), [](auto a, auto b) { return a.first > b.first; });
    bool first_user = true;
    for (auto [lf, c] : order) {
      const TreeNode& child = tree_.nodes[c];
      FairshareRow row;
      row.key = child.key;
      row.parent = child.parent;
      row.raw_shares = child.shares;
      const double ratio = sibling_shares > 0 ? double(child.shares) / sibling_shares : 0;
      row.norm_shares = s_parent * ratio;
      row.raw_usage = child.usage;
      row.norm_usage = total_ > 0 ? child.usage / total_ : 0;
      row.effective_usage = row.norm_usage + (ue_parent - row.norm_usage) * ratio;
      row.level_fairshare = lf;
      if (child.user) UserFactor(row, lf, first_user);
      out_.rows_.push_back(row);
      Walk(c, row.norm_shares, row.effective_usage);
    }
  }

 private:
  void UserFactor(FairshareRow& row, double lf, bool& first_user) {
    if (algorithm_ == FairshareAlgorithm::kClassic) {
      row.factor = row.norm_shares > 0 ? std::exp2(-row.effective_usage / row.norm_shares) : 0;
    } else {
      // Users visited in order get ranks n, n-1, ...; tied siblings share a rank.
      const bool tie = !first_user && lf == last_lf_;
      const double rank = tie ? last_rank_ : double(user_count_ - visited_);
      row.factor = user_count_ > 0 ? rank / double(user_count_) : 1;
      last_rank_ = rank;
      last_lf_ = lf;
      first_user = false;
    }
    ++visited_;
    out_.factor_[row.key] = total_ > 0 ? row.factor : 1.0;
  }

  FairshareTree& out_;
  const Tree& tree_;
  double total_;
  FairshareAlgorithm algorithm_;
  size_t user_count_ = 0, visited_ = 0;
  double last_rank_ = 0, last_lf_ = -1;
};

FairshareTree::FairshareTree(const PolicySet& policy, const std::map<std::string, double>& usage,
                             const std::vector<Job>& jobs) {
  Tree tree = BuildTree(policy, usage, jobs);
  const double total = tree.Link();
  Walker(*this, tree, total, policy.fairshare.algorithm).Walk(0, 1.0, total > 0 ? 1.0 : 0.0);
}

double FairshareTree::Factor(const std::string& account, const std::string& user) const {
  auto it = factor_.find(UsageKey(account, user));
  return it == factor_.end() ? 1.0 : it->second;
}

}  // namespace mlsched::core
