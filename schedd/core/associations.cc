#include "schedd/core/associations.h"

#include <algorithm>
#include <set>

namespace mlsched::core {
namespace {

using Code = AssociationResult::Code;

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const AccountPolicy* FindAccount(const PolicySet& policy, const std::string& name) {
  for (const AccountPolicy& a : policy.accounts)
    if (a.name == name) return &a;
  return nullptr;
}

// "(FILE:LINE lists bob, carol)": `what` says what the list holds; the policy line when known.
std::string Cite(const std::string& line, const std::string& verb, const std::vector<std::string>& names,
                 const std::string& none) {
  const std::string listed = names.empty() ? none : verb + " " + Join(names);
  return "(" + (line.empty() ? "the policy " : line + " ") + listed + ")";
}

// The accounts that list `user`, in policy order.
std::vector<std::string> AccountsOf(const PolicySet& policy, const std::string& user) {
  std::vector<std::string> out;
  for (const AccountPolicy& a : policy.accounts)
    if (AccountListsUser(a, user)) out.push_back(a.name);
  return out;
}

std::string MayUse(const PolicySet& policy, const std::string& user) {
  const auto mine = AccountsOf(policy, user);
  return mine.empty() ? "no account lists user " + user : "user " + user + " may use: " + Join(mine);
}

// Enforced membership: the account must be defined and list the user.
AssociationResult CheckMembership(const PolicySet& policy, const AssociationRequest& req, const std::string& account) {
  auto denied = [](std::string m) { return AssociationResult{Code::kDenied, "", std::move(m)}; };
  if (policy.accounts.empty()) {
    if (account == "default") return {};
    return denied("account '" + account +
                  "' is not defined: the policy defines no [[accounts]], so every job is charged to 'default'");
  }
  const AccountPolicy* a = FindAccount(policy, account);
  if (!a && req.account.empty())
    return denied("user " + req.user + " has no account: no [[accounts]] entry lists them (an operator can add " +
                  req.user + " to an account's users)");
  if (!a) return denied("account '" + account + "' is not defined in the policy; " + MayUse(policy, req.user));
  if (AccountListsUser(*a, req.user)) return {};
  std::vector<std::string> users;
  for (const auto& [u, shares] : a->user_shares) users.push_back(u);
  return denied("user " + req.user + " may not use account " + account + " " +
                Cite(a->source.Of("users"), "lists", users, "lists no users") + "; " + MayUse(policy, req.user));
}

// QoS: defined (under enforcement), allowed by the account's list (under enforcement) and the
// partition's list (always). Skipped when the policy defines no QoS (QoS names are then ignored).
AssociationResult CheckQos(const PolicySet& policy, const AssociationRequest& req, const std::string& account,
                           const PartitionPolicy* part) {
  if (policy.qos.empty()) return {};
  const std::string qos = req.qos.empty() ? policy.default_qos : req.qos;
  const bool defined = std::any_of(policy.qos.begin(), policy.qos.end(), [&](const QosPolicy& q) { return q.name == qos; });
  if (policy.enforce_associations && !defined) {
    std::vector<std::string> names;
    for (const QosPolicy& q : policy.qos) names.push_back(q.name);
    return {Code::kInvalid, "", "unknown QoS '" + qos + "' (QoS: " + Join(names) + ")"};
  }
  if (req.privileged) return {};
  if (policy.enforce_associations)
    if (const AccountPolicy* owner = QosListOwner(policy, account); owner && !Contains(owner->allow_qos, qos)) {
      const std::string under = owner->name == account ? "" : " (under " + owner->name + ")";
      return {Code::kDenied, "",
              "account " + account + under + " does not allow QoS " + qos + " " +
                  Cite(owner->source.Of("allow_qos"), "allows", owner->allow_qos, "allows none") +
                  (req.qos.empty() ? "; give --qos" : "")};
    }
  if (part && !part->allow_qos.empty() && !Contains(part->allow_qos, qos))
    return {Code::kDenied, "",
            "partition " + part->name + " does not allow QoS " + qos + " " +
                Cite(part->source.Of("allow_qos"), "allows", part->allow_qos, "allows none") +
                (req.qos.empty() ? "; give --qos" : "")};
  return {};
}

}  // namespace

bool AccountListsUser(const AccountPolicy& account, const std::string& user) {
  return account.user_shares.count(user) > 0;
}

std::string DefaultAccount(const PolicySet& policy, const std::string& user) {
  for (const UserPolicy& u : policy.users)
    if (u.name == user && !u.default_account.empty()) return u.default_account;
  for (const AccountPolicy& a : policy.accounts)
    if (AccountListsUser(a, user)) return a.name;
  return "default";
}

const AccountPolicy* QosListOwner(const PolicySet& policy, const std::string& account) {
  std::set<std::string> seen;
  for (const AccountPolicy* a = FindAccount(policy, account); a && seen.insert(a->name).second;
       a = a->parent.empty() ? nullptr : FindAccount(policy, a->parent))
    if (!a->allow_qos.empty()) return a;
  return nullptr;
}

AssociationResult CheckAssociation(const PolicySet& policy, const AssociationRequest& req) {
  const std::string account = req.account.empty() ? DefaultAccount(policy, req.user) : req.account;
  if (!req.privileged && policy.enforce_associations)
    if (AssociationResult r = CheckMembership(policy, req, account); !r.ok()) return r;
  const PartitionPolicy* part = FindPartition(policy, req.partition);
  if (!req.privileged && part && !part->allow_accounts.empty() && !Contains(part->allow_accounts, account))
    return {Code::kDenied, "",
            "partition " + part->name + " does not allow account " + account + " " +
                Cite(part->source.Of("allow_accounts"), "allows", part->allow_accounts, "allows none")};
  if (AssociationResult r = CheckQos(policy, req, account, part); !r.ok()) return r;
  return {Code::kOk, account, ""};
}

}  // namespace mlsched::core
