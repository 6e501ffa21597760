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
/// Applies --victim-order (policy key victim_order): "least-lost-work" (core::VictimOrder::
/// kLeastLostWork) or "youngest-first" (kYoungestFirst). Throws std::invalid_argument otherwise.
void SetVictimOrder(core::PolicySet& policy, const std::string& order);
/// "least-lost-work" | "youngest-first".
const char* VictimOrderName(core::VictimOrder order);

/// "fifo", "fifo+easy", ... from the policy's settings; with QoS preemption, the victim order is
/// appended (", youngest-first victims").
std::string DescribeSchedulingPolicy(const core::PolicySet& policy);

}  // namespace mlsched::sim
