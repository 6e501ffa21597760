#include "schedd/core/fairshare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>

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

// Names hashed with heterogeneous lookup: a job's account and user are looked up as they are.
struct NameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
template <class V>
using NameMap = std::unordered_map<std::string, V, NameHash, std::equal_to<>>;

// A user association's key: its account's node and the user's name; looked up by a view of both.
struct UserKey {
  size_t account = 0;
  std::string name;
};
struct UserKeyView {
  size_t account = 0;
  std::string_view name;
};
struct UserKeyHash {
  using is_transparent = void;
  size_t operator()(const UserKeyView& k) const noexcept {
    return std::hash<std::string_view>{}(k.name) ^ (k.account * 0x9e3779b97f4a7c15ull);
  }
  size_t operator()(const UserKey& k) const noexcept { return (*this)(UserKeyView{k.account, k.name}); }
};
struct UserKeyEq {
  using is_transparent = void;
  template <class A, class B>
  bool operator()(const A& a, const B& b) const noexcept {
    return a.account == b.account && std::string_view(a.name) == std::string_view(b.name);
  }
};

struct TreeNode {
  std::string key, parent;
  int64_t shares = 1;
  bool user = false;
  double usage = 0;  // own usage, then the subtree's
  size_t up = 0;  // a user's account node; an account's parent is looked up in Link
};

// The association tree: nodes[0] is the root (also the account ""); accounts from the policy, the
// jobs and the usage; users as leaves "account/user" of the account they were found under (a
// parent cycle may move that account, not them). Built once per priority computation.
struct Tree {
  std::vector<TreeNode> nodes{TreeNode{}};
  NameMap<size_t> accounts;
  std::unordered_map<UserKey, size_t, UserKeyHash, UserKeyEq> users;  // user leaves
  // Children of node n: child_list[child_start[n] .. child_start[n + 1]), in name order (Link).
  std::vector<size_t> child_list, child_start;
  const PolicySet* policy = nullptr;

  std::span<const size_t> Children(size_t n) const {
    return {child_list.data() + child_start[n], child_start[n + 1] - child_start[n]};
  }

  size_t Account(std::string_view name) {
    if (name.empty()) return 0;
    auto it = accounts.find(name);
    if (it != accounts.end()) return it->second;
    accounts.emplace(std::string(name), nodes.size());
    TreeNode& n = nodes.emplace_back();
    n.key = std::string(name);
    return nodes.size() - 1;
  }
  size_t User(std::string_view account, std::string_view user) {
    const size_t acc = Account(account);
    if (auto it = users.find(UserKeyView{acc, user}); it != users.end()) return it->second;
    int64_t shares = 1;
    for (const AccountPolicy& a : policy->accounts)
      if (a.name == account)
        if (auto s = a.user_shares.find(std::string(user)); s != a.user_shares.end()) shares = s->second;
    const size_t n = nodes.size();
    TreeNode& t = nodes.emplace_back();
    t.key = UsageKey(std::string(account), std::string(user));
    t.parent = std::string(account);
    t.shares = shares;
    t.user = true;
    t.up = acc;
    users.emplace(UserKey{acc, std::string(user)}, n);
    return n;
  }
  // The user node of (account, user), if the tree has it.
  std::optional<size_t> FindUser(std::string_view account, std::string_view user) const {
    size_t acc = 0;
    if (!account.empty()) {
      auto a = accounts.find(account);
      if (a == accounts.end()) return std::nullopt;
      acc = a->second;
    }
    auto u = users.find(UserKeyView{acc, user});
    if (u == users.end()) return std::nullopt;
    return u->second;
  }
  // Links children (a parent cycle re-parents to the root), sorts siblings by name and sums
  // subtree usage; returns the total.
  double Link() {
    for (TreeNode& t : nodes)
      if (!t.user && !t.parent.empty())
        if (auto it = accounts.find(t.parent); it != accounts.end()) t.up = it->second;
    std::vector<size_t> seen_by(nodes.size(), 0);  // seen_by[p] == n: p is on n's way up
    for (size_t n = 1; n < nodes.size(); ++n) {
      seen_by[n] = n;
      for (size_t p = nodes[n].up; p != 0; p = nodes[p].up) {
        if (seen_by[p] == n) {
          nodes[n].parent = "";
          nodes[n].up = 0;
          break;
        }
        seen_by[p] = n;
      }
    }
    // One list of every node's children (counting sort by parent), each sibling run by name.
    child_start.assign(nodes.size() + 1, 0);
    for (size_t n = 1; n < nodes.size(); ++n) ++child_start[nodes[n].up + 1];
    for (size_t p = 0; p < nodes.size(); ++p) child_start[p + 1] += child_start[p];
    child_list.resize(nodes.size() - 1);
    std::vector<size_t> next(child_start.begin(), child_start.end() - 1);
    for (size_t n = 1; n < nodes.size(); ++n) child_list[next[nodes[n].up]++] = n;
    for (size_t p = 0; p < nodes.size(); ++p)
      std::sort(child_list.begin() + static_cast<std::ptrdiff_t>(child_start[p]),
                child_list.begin() + static_cast<std::ptrdiff_t>(child_start[p + 1]),
                [&](size_t a, size_t b) { return nodes[a].key < nodes[b].key; });
    return SumUsage(0);
  }
  double SumUsage(size_t n) {
    for (size_t c : Children(n)) nodes[n].usage += SumUsage(c);
    return nodes[n].usage;
  }
};

Tree BuildTree(const PolicySet& policy, const std::map<std::string, double>& usage,
               const std::vector<Job>& jobs) {
  Tree tree;
  tree.policy = &policy;
  tree.nodes.reserve(1 + 2 * policy.accounts.size() + usage.size());  // usually all of them
  tree.accounts.reserve(policy.accounts.size() + usage.size());
  tree.users.reserve(usage.size());
  for (const AccountPolicy& a : policy.accounts) tree.nodes[tree.Account(a.name)].shares = a.shares;
  for (const AccountPolicy& a : policy.accounts) {
    // An unknown parent, or the account itself, leaves it at the top level.
    bool known = !a.parent.empty() && tree.accounts.count(a.parent) && a.parent != a.name;
    tree.nodes[tree.Account(a.name)].parent = known ? a.parent : "";
  }
  for (const AccountPolicy& a : policy.accounts)
    for (const auto& [user, s] : a.user_shares) tree.User(a.name, user);
  const Job* last = nullptr;  // jobs of one user often come together: one lookup for the run
  for (const Job& j : jobs) {
    if (IsFinal(j.state)) continue;
    if (last && last->spec.user == j.spec.user && last->spec.account == j.spec.account) continue;
    tree.User(j.spec.account, j.spec.user);
    last = &j;
  }
  for (const auto& [key, value] : usage) {
    size_t slash = key.find('/');
    const std::string_view k = key;
    size_t n = slash == std::string::npos ? tree.Account(k) : tree.User(k.substr(0, slash), k.substr(slash + 1));
    tree.nodes[n].usage += value;
  }
  return tree;
}

}  // namespace

struct FairshareTree::Impl {
  Tree tree;
  double total = 0;
  FairshareAlgorithm algorithm = FairshareAlgorithm::kClassic;
  std::vector<double> factor;  // by node; users only
  mutable std::optional<std::vector<FairshareRow>> rows;
};

// Depth-first walk computing every user's factor, and every row when asked; siblings in name
// order (classic) or by level fairshare (Fair Tree).
class FairshareTree::Walker {
 public:
  Walker(const Tree& tree, double total, FairshareAlgorithm algorithm, std::vector<double>& factor,
         std::vector<FairshareRow>* rows)
      : tree_(tree), total_(total), algorithm_(algorithm), factor_(factor), rows_(rows) {
    for (const TreeNode& t : tree.nodes) user_count_ += t.user;
    factor_.assign(tree.nodes.size(), 1.0);
  }

  void Walk(size_t n, double s_parent, double ue_parent) {
    const std::span<const size_t> children = tree_.Children(n);
    double sibling_shares = 0, sibling_usage = 0;
    for (size_t c : children) {
      sibling_shares += double(tree_.nodes[c].shares);
      sibling_usage += tree_.nodes[c].usage;
    }
    std::vector<std::pair<double, size_t>> order;  // (level fairshare, child)
    order.reserve(children.size());
    for (size_t c : children) {
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
      const double ratio = sibling_shares > 0 ? double(child.shares) / sibling_shares : 0;
      const double norm_shares = s_parent * ratio;
      const double norm_usage = total_ > 0 ? child.usage / total_ : 0;
      const double effective_usage = norm_usage + (ue_parent - norm_usage) * ratio;
      double factor = 0;
      if (child.user) {
        factor = UserFactor(norm_shares, effective_usage, lf, first_user);
        factor_[c] = total_ > 0 ? factor : 1.0;
      }
      if (rows_) {
        FairshareRow& row = rows_->emplace_back();
        row.key = child.key;
        row.parent = child.parent;
        row.raw_shares = child.shares;
        row.norm_shares = norm_shares;
        row.raw_usage = child.usage;
        row.norm_usage = norm_usage;
        row.effective_usage = effective_usage;
        row.level_fairshare = lf;
        row.factor = factor;
      }
      Walk(c, norm_shares, effective_usage);
    }
  }

 private:
  double UserFactor(double norm_shares, double effective_usage, double lf, bool& first_user) {
    double factor = 0;
    if (algorithm_ == FairshareAlgorithm::kClassic) {
      factor = norm_shares > 0 ? std::exp2(-effective_usage / norm_shares) : 0;
    } else {
      // Users visited in order get ranks n, n-1, ...; tied siblings share a rank.
      const bool tie = !first_user && lf == last_lf_;
      const double rank = tie ? last_rank_ : double(user_count_ - visited_);
      factor = user_count_ > 0 ? rank / double(user_count_) : 1;
      last_rank_ = rank;
      last_lf_ = lf;
      first_user = false;
    }
    ++visited_;
    return factor;
  }

  const Tree& tree_;
  double total_;
  FairshareAlgorithm algorithm_;
  std::vector<double>& factor_;
  std::vector<FairshareRow>* rows_;
  size_t user_count_ = 0, visited_ = 0;
  double last_rank_ = 0, last_lf_ = -1;
};

FairshareTree::FairshareTree(const PolicySet& policy, const std::map<std::string, double>& usage,
                             const std::vector<Job>& jobs)
    : impl_(std::make_unique<Impl>()) {
  impl_->tree = BuildTree(policy, usage, jobs);
  impl_->total = impl_->tree.Link();
  impl_->algorithm = policy.fairshare.algorithm;
  Walker(impl_->tree, impl_->total, impl_->algorithm, impl_->factor, nullptr)
      .Walk(0, 1.0, impl_->total > 0 ? 1.0 : 0.0);
}

FairshareTree::~FairshareTree() = default;
FairshareTree::FairshareTree(FairshareTree&&) noexcept = default;
FairshareTree& FairshareTree::operator=(FairshareTree&&) noexcept = default;

const std::vector<FairshareRow>& FairshareTree::rows() const {
  if (!impl_->rows) {
    std::vector<double> factor;
    auto& rows = impl_->rows.emplace();
    rows.reserve(impl_->tree.nodes.size() - 1);
    Walker(impl_->tree, impl_->total, impl_->algorithm, factor, &rows).Walk(0, 1.0, impl_->total > 0 ? 1.0 : 0.0);
  }
  return *impl_->rows;
}

double FairshareTree::Factor(const std::string& account, const std::string& user) const {
  const auto n = impl_->tree.FindUser(account, user);
  return n ? impl_->factor[*n] : 1.0;
}

}  // namespace mlsched::core
