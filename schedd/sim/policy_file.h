// The scheduler policy as a TOML file, for the simulator (keys documented in README.md), and the
// --backfill override. Fills core::PolicySet, the same plain data the daemon hands the core.
#pragma once

#include <map>
#include <string>

#include "schedd/core/types.h"

namespace mlsched::sim {

/// Reads a policy file. `shares` (optional) receives the [shares] table (account -> share).
/// Throws std::runtime_error "FILE: key: message" on a syntax error, an unknown key or a bad value.
core::PolicySet ReadPolicyFile(const std::string& path, std::map<std::string, double>* shares);

/// Applies --backfill none|easy|conservative to the policy. Throws std::invalid_argument on an
/// unknown mode or one the core does not offer.
void SetBackfillMode(core::PolicySet& policy, const std::string& mode);

/// "fifo", "fifo+easy", ... from the policy's settings.
std::string DescribeSchedulingPolicy(const core::PolicySet& policy);

}  // namespace mlsched::sim
