// PolicyReader: submit-time associations: [[accounts]] users and allow_qos, [[partitions]]
// allow_accounts and allow_qos, [[users]] default accounts, and the names they refer to. Entries
// keep their FILE:LINE (core::SourceLines) so that schedd's refusals can cite the policy.
#include <set>

#include "schedd/core/associations.h"
#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

std::string PolicyReader::Line(const toml::source_region& where) const {
  return file_ + ":" + std::to_string(where.begin.line);
}

void PolicyReader::KeepLines(const toml::table& t, std::initializer_list<const char*> keys, core::SourceLines& out) {
  out.entry = Line(t.source());
  for (const char* k : keys)
    if (const toml::node* n = t.get(k)) out.keys[k] = Line(n->source());
}

void PolicyReader::ReadAccountUsers(const toml::table& t, const std::string& ctx, core::AccountPolicy& a) {
  const toml::node* u = t.get("users");
  if (!u) return;
  if (const toml::array* names = u->as_array()) {  // users = ["alice", "bob"]: 1 share each
    for (const toml::node& e : *names) {
      if (auto s = e.value_exact<std::string>()) a.user_shares[*s] = 1;
      else Error(e.source(), ctx + ": 'users' must list user names (strings)");
    }
    return;
  }
  const toml::table* users = u->as_table();
  if (!users) return Error(u->source(), ctx + ": 'users' must be an array of user names or a table of user = shares");
  for (auto&& [user, shares] : *users) {
    auto v = shares.value_exact<int64_t>();
    if (!v || *v < 0) Error(shares.source(), ctx + ": shares of user '" + std::string(user.str()) + "' must be an integer >= 0");
    else a.user_shares[std::string(user.str())] = *v;
  }
}

core::UserPolicy PolicyReader::ReadUser(const toml::table& t, const std::string& ctx) {
  CheckKeys(t, {"name", "default_account"}, ctx);
  core::UserPolicy u;
  Str(t, "name", u.name, ctx);
  if (u.name.empty()) Error(t.source(), ctx + ": 'name' is required");
  Str(t, "default_account", u.default_account, ctx);
  KeepLines(t, {"name", "default_account"}, u.source);
  return u;
}

void PolicyReader::CheckNames(const toml::table& t, const char* key, const std::set<std::string>& defined,
                              const std::string& what, const std::string& ctx) {
  const toml::node* n = t.get(key);
  const toml::array* a = n ? n->as_array() : nullptr;
  if (!a) return;
  for (const toml::node& e : *a) {
    auto s = e.value_exact<std::string>();
    if (s && !defined.count(*s))
      Error(e.source(), ctx + ": '" + key + "' names " + what + " '" + *s + "', which is not a defined " + what +
                            (defined.empty() ? " (the policy defines no [[" + std::string(what == "QoS" ? "qos" : "accounts") + "]])" : ""));
  }
}

void PolicyReader::CheckAssociations(const toml::table& root, const core::PolicySet& p) {
  std::set<std::string> accounts, qos;
  for (const auto& a : p.accounts) accounts.insert(a.name);
  for (const auto& q : p.qos) qos.insert(q.name);
  auto each = [&](const char* key, const std::function<void(const toml::table&, const std::string&)>& fn) {
    const toml::node* n = root.get(key);
    const toml::array* arr = n ? n->as_array() : nullptr;
    if (!arr || !arr->is_array_of_tables()) return;  // reported by EachTable
    size_t i = 0;
    for (const toml::node& e : *arr) fn(*e.as_table(), std::string("[[") + key + "]] #" + std::to_string(++i));
  };
  each("partitions", [&](const toml::table& t, const std::string& ctx) {
    CheckNames(t, "allow_accounts", accounts, "account", ctx);
    CheckNames(t, "allow_qos", qos, "QoS", ctx);
  });
  each("accounts", [&](const toml::table& t, const std::string& ctx) { CheckNames(t, "allow_qos", qos, "QoS", ctx); });
  std::set<std::string> users;
  each("users", [&](const toml::table& t, const std::string& ctx) {
    const std::string name = t["name"].value_or(std::string());
    if (!name.empty() && !users.insert(name).second) Error(t.source(), ctx + ": duplicate user '" + name + "'");
    const toml::node* d = t.get("default_account");
    const std::string account = d ? d->value_or(std::string()) : "";
    if (account.empty()) return;
    const core::AccountPolicy* found = nullptr;
    for (const auto& a : p.accounts)
      if (a.name == account) found = &a;
    if (!found) return Error(d->source(), ctx + ": default_account '" + account + "' is not a defined account");
    if (p.enforce_associations && !name.empty() && !core::AccountListsUser(*found, name))
      Error(d->source(), ctx + ": default_account '" + account + "' does not list user '" + name +
                             "' in its users (" + found->source.Of("users") + "), so " + name + " could not use it");
  });
}

}  // namespace mlsched::policy
