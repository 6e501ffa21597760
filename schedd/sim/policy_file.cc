#include "schedd/sim/policy_file.h"

#include <stdexcept>

#include <toml++/toml.h>

namespace mlsched::sim {
namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& message) {
  throw std::runtime_error(where + ": " + message);
}

void CheckKeys(const toml::table& t, const std::string& where,
               std::initializer_list<std::string_view> known) {
  for (auto&& [key, value] : t) {
    bool ok = false;
    for (auto k : known) ok = ok || key.str() == k;
    if (!ok) Fail(where, "unknown key '" + std::string(key.str()) + "'");
  }
}

int64_t PositiveSeconds(const toml::table& t, std::string_view key, int64_t fallback,
                        const std::string& where) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return fallback;
  auto v = n->value<int64_t>();
  if (!v || *v <= 0) Fail(where, std::string(key) + ": must be a positive number of seconds");
  return *v;
}

core::PartitionPolicy ReadPartition(const toml::table& t, const std::string& where) {
  CheckKeys(t, where, {"name", "default_time_limit_s", "max_time_limit_s", "pools", "up"});
  core::PartitionPolicy p;
  auto name = t["name"].value<std::string>();
  if (!name || name->empty()) Fail(where, "name: required");
  p.name = *name;
  p.default_time_limit = PositiveSeconds(t, "default_time_limit_s", p.default_time_limit, where);
  p.max_time_limit = PositiveSeconds(t, "max_time_limit_s", p.max_time_limit, where);
  p.up = t["up"].value_or(true);
  if (const toml::array* pools = t["pools"].as_array()) {
    for (const auto& v : *pools) {
      auto s = v.value<std::string>();
      if (!s || !core::ParsePool(*s)) Fail(where, "pools: want on-demand, spot or reserved");
      p.pools.push_back(*s);
    }
  }
  return p;
}

}  // namespace

core::PolicySet ReadPolicyFile(const std::string& path, std::map<std::string, double>* shares) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    Fail(path + ":" + std::to_string(e.source().begin.line), std::string(e.description()));
  }
  CheckKeys(root, path, {"default_partition", "partitions", "shares", "backfill"});
  core::PolicySet policy;
  if (const toml::array* parts = root["partitions"].as_array()) {
    policy.partitions.clear();
    for (size_t i = 0; i < parts->size(); ++i) {
      const std::string where = path + ": [[partitions]] #" + std::to_string(i + 1);
      const toml::table* t = (*parts)[i].as_table();
      if (t == nullptr) Fail(where, "not a table");
      policy.partitions.push_back(ReadPartition(*t, where));
    }
  }
  policy.default_partition = root["default_partition"].value_or(policy.default_partition);
  if (auto mode = root["backfill"].value<std::string>()) SetBackfillMode(policy, *mode);
  if (const toml::table* s = root["shares"].as_table()) {
    for (auto&& [account, value] : *s) {
      auto v = value.value<double>();
      if (!v || *v < 0) Fail(path + ": shares." + std::string(account.str()), "want a number >= 0");
      if (shares != nullptr) (*shares)[std::string(account.str())] = *v;
    }
  }
  return policy;
}

void SetBackfillMode(core::PolicySet& policy, const std::string& mode) {
  if (mode == "none") return;
  if (mode == "easy" || mode == "conservative") {
    throw std::invalid_argument("--backfill " + mode +
                                ": the scheduling core offers no backfill mode yet");
  }
  throw std::invalid_argument("unknown backfill mode '" + mode +
                              "' (want none, easy or conservative)");
}

std::string DescribeSchedulingPolicy(const core::PolicySet& policy) { return "fifo"; }

}  // namespace mlsched::sim
