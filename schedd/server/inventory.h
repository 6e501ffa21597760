// The node inventory at registration (policy [inventory] and [[nodes]], core::NodeInventory): the
// controller, not the node, decides what a node holds (slurm.conf's NodeName= lines). A node
// certificate proves which node an agent is, not what the node has: a registration above the
// declared shape is refused (or clamped), an undeclared node is refused when the inventory is
// strict, and a node whose reported capacity changed since its last registration is drained.
#pragma once

#include <string>

#include "mlsched/v1/agent.pb.h"
#include "schedd/core/types.h"

namespace mlsched::server {

/// What the inventory makes of one registration.
struct InventoryVerdict {
  std::string error;           // "" = admitted; else why it is refused (for the agent and the log)
  v1::RegisterNode admitted;   // the registration as the controller takes it (clamped when so)
  std::string clamped;         // what clamping cut ("cpus 1024 -> 64, gpus h100 64 -> 8"); "" = nothing
};

/// The [[nodes]] entry naming `node`, or null.
const core::NodeDeclaration* FindDeclaration(const core::NodeInventory& inv, const std::string& node);

/// Checks `reg` against the inventory. `provisioned`: the shape of the provisioned pool that asked
/// for this node name (it is declared by its pool), or null. A declared node must register its
/// declared pool, region, zone and domain (those set) and at most the declared CPUs, memory and
/// GPUs of each type (a type not declared: none); an undeclared one is refused when `inv.strict`.
InventoryVerdict AdmitRegistration(const core::NodeInventory& inv, const v1::RegisterNode& reg,
                                   const core::Node* provisioned);

/// "" when `before` and `after` hold the same CPUs, memory and GPUs; else what changed, e.g.
/// "cpus 4 -> 8, gpus h100 8 -> 4".
std::string CapacityChange(const v1::Resources& before, const v1::Resources& after);

}  // namespace mlsched::server
