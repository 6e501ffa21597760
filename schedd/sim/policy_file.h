// The scheduler policy as a TOML file, for the simulator (keys documented in README.md), and the
// --backfill override. Fills core::PolicySet, the same plain data the daemon hands the core.
#pragma once

#include <map>
#include <string>

#include "schedd/core/types.h"

namespace mlsched::sim {

/// Reads a policy file (keys in README.md). `shares` (optional) receives each [[accounts]] entry's
/// shares (account -> shares). Throws std::runtime_error "FILE: key: message" on a syntax error,
/// an unknown key or a bad value.
core::PolicySet ReadPolicyFile(const std::string& path, std::map<std::string, double>* shares);

/// Applies --backfill none|easy|conservative. Throws std::invalid_argument on an unknown mode.
void SetBackfillMode(core::PolicySet& policy, const std::string& mode);
/// Applies --backfill-order queue|shortest-first. Throws std::invalid_argument otherwise.
void SetBackfillOrder(core::PolicySet& policy, const std::string& order);
/// Applies --queue-order fifo|multifactor. Throws std::invalid_argument otherwise.
void SetQueueOrder(core::PolicySet& policy, const std::string& order);

/// "fifo", "fifo+easy", ... from the policy's settings.
std::string DescribeSchedulingPolicy(const core::PolicySet& policy);

}  // namespace mlsched::sim
