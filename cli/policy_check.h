// mladmin policy check: a policy file checked locally, exactly as schedd loads it (the policy
// loader, then the [pricing] tables), with a one-line summary of what it defines.
#pragma once

#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::cli {

struct PolicyCheckResult {
  bool ok = false;
  std::vector<std::string> errors;  // every error as "FILE:LINE:COL: message" (none when ok)
  std::string summary;              // PolicySummary of the loaded policy (when ok)
};

/// Loads `path` with policy::LoadPolicyFile and, when that succeeds, report::LoadPricing, like
/// schedd's --policy and SIGHUP (all or nothing).
PolicyCheckResult CheckPolicyFile(const std::string& path);

/// One line: "2 partitions (batch, gpu), 3 QoS (high, normal, low), 4 accounts, queue multifactor,
/// backfill easy"; names in the file's order.
std::string PolicySummary(const core::PolicySet& policy);

}  // namespace mlsched::cli
