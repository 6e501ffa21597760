// Accelerator fallback tiers: a job that asked for one GPU type may, after waiting a budget since
// submission, also run on the next tier (another GPU type, and finally CPU-only), e.g.
// h100, then a100 after 10 minutes, then CPUs after an hour.
#pragma once

#include "schedd/core/ledger.h"
#include "schedd/core/types.h"

namespace mlsched::core {

/// The GPU types `spec` may use after waiting `waited` seconds: its own preference (gpu_types, or
/// the type named in per_task.gpus) followed by every GPU tier of spec.fallback whose wait has
/// passed, in order. Empty when the job takes any GPU type or no GPU.
std::vector<std::string> OpenGpuTiers(const JobSpec& spec, Duration waited);

/// True when spec.fallback has a "cpu" tier whose wait has passed.
bool CpuTierOpen(const JobSpec& spec, Duration waited);

/// The spec a pending job is placed with this cycle. GPU tiers: gpu_types = OpenGpuTiers (tried in
/// that order by the placer). When the CPU tier is open and no GPU placement fits `ledger` now,
/// the CPU-only variant (no GPUs) is used instead (the dry run leaves `ledger` exactly as it was).
/// Jobs without fallback tiers are returned as is.
JobSpec EffectiveSpec(const JobSpec& spec, Duration waited, NodeLedger& ledger,
                      const PartitionPolicy* partition);

}  // namespace mlsched::core
