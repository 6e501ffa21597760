#include "schedd/core/fallback.h"

#include <algorithm>

#include "schedd/core/placement.h"

namespace mlsched::core {

std::vector<std::string> OpenGpuTiers(const JobSpec& spec, Duration waited) {
  if (spec.per_task.GpuCount() == 0) return {};
  std::vector<std::string> types = spec.gpu_types;
  if (types.empty())
    for (const auto& [type, count] : spec.per_task.gpus)
      if (count > 0 && !type.empty()) types.push_back(type);
  if (types.empty()) return {};  // any GPU type already
  for (const FallbackTier& tier : spec.fallback)
    if (tier.accelerator != "cpu" && waited >= tier.after &&
        std::find(types.begin(), types.end(), tier.accelerator) == types.end())
      types.push_back(tier.accelerator);
  return types;
}

bool CpuTierOpen(const JobSpec& spec, Duration waited) {
  for (const FallbackTier& tier : spec.fallback)
    if (tier.accelerator == "cpu" && waited >= tier.after) return true;
  return false;
}

JobSpec EffectiveSpec(const JobSpec& spec, Duration waited, NodeLedger& ledger,
                      const PartitionPolicy* partition) {
  if (spec.fallback.empty() || spec.per_task.GpuCount() == 0) return spec;
  JobSpec gpu = spec;
  if (auto types = OpenGpuTiers(spec, waited); !types.empty()) {
    gpu.gpu_types = types;
    gpu.per_task.gpus = {{"", spec.per_task.GpuCount()}};
  }
  if (!CpuTierOpen(spec, waited)) return gpu;
  // CPU tier open: keep the GPUs if the gang fits on them now, else run CPU-only.
  std::vector<size_t> eligible;
  for (size_t i = 0; i < ledger.size(); ++i)
    if (NodeEligible(ledger.slot(i), gpu, partition)) eligible.push_back(i);
  if (!eligible.empty())
    if (auto demand = ResolveTaskDemand(gpu, *ledger.slot(eligible.front()).node)) {
      AllocationTxn txn(ledger);  // discarded on return: a dry run
      if (PlaceGangNow(txn, ledger, eligible, gpu, *demand)) return gpu;
    }
  JobSpec cpu = spec;
  cpu.per_task.gpus.clear();
  cpu.gpu_types.clear();
  return cpu;
}

}  // namespace mlsched::core
