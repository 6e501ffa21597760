#include "cli/policy_check.h"

#include "schedd/policy/policy_loader.h"
#include "schedd/report/report.h"

namespace mlsched::cli {

namespace {

template <typename T>
std::string Names(const std::vector<T>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i.name;
  return out;
}

std::string Count(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

PolicyCheckResult CheckPolicyFile(const std::string& path) {
  PolicyCheckResult out;
  auto r = policy::LoadPolicyFile(path);
  if (!r.ok()) {
    for (const auto& e : r.errors) out.errors.push_back(e.ToString());
    return out;
  }
  std::string pricing_error;
  if (!report::LoadPricing(path, &pricing_error)) {
    out.errors.push_back(pricing_error);
    return out;
  }
  out.ok = true;
  out.summary = PolicySummary(*r.policy);
  return out;
}

std::string PolicySummary(const core::PolicySet& p) {
  std::string s = Count(p.partitions.size(), "partition", "partitions");
  if (!p.partitions.empty()) s += " (" + Names(p.partitions) + ")";
  s += ", " + std::to_string(p.qos.size()) + " QoS";
  if (!p.qos.empty()) s += " (" + Names(p.qos) + ")";
  s += ", " + Count(p.accounts.size(), "account", "accounts");
  s += std::string(", queue ") + (p.queue_order == core::QueueOrder::kMultifactor ? "multifactor" : "fifo");
  s += std::string(", backfill ") + core::BackfillModeName(p.backfill.mode);
  return s;
}

}  // namespace mlsched::cli
