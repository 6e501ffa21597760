// Synthetic workloads for mlsim_bench, generated in memory from a fixed seed (same options ->
// identical trace on every platform: the generator uses its own samplers, not <random>'s
// implementation-defined distributions). They exercise the simulator at sizes the bundled traces
// do not reach; they are not models of any particular site beyond the sizes they borrow.
#pragma once

#include <cstdint>

#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/trace.h"

namespace mlsched::bench {

/// An SWF-like CPU workload the size of SDSC-BLUE (Parallel Workloads Archive: 1,152 processors,
/// about 230k jobs over about two years), mapped as mlsim maps SWF: one pool node, one task of
/// `size` CPUs per job.
struct BlueOptions {
  int64_t jobs = 230000;                       // number of jobs
  int64_t processors = 1152;                   // machine size, processors
  double offered_load = 0.8;                   // sum(size x run time) / (processors x span)
  core::Duration max_run_s = 36 * 3600;        // cap on run times and user estimates, seconds
  uint64_t seed = 2000;                        // generator seed
};

/// A GPU-cluster workload: uniform nodes of `gpus_per_node` GPUs; single-node jobs are one task
/// of 1-8 GPUs, multi-node gangs are one 8-GPU task per node (16-256 GPUs).
struct GpuOptions {
  int64_t jobs = 1000000;                      // number of jobs
  int nodes = 10000;                           // nodes in the fleet
  int gpus_per_node = 8;                       // GPUs per node
  double offered_load = 0.8;                   // sum(GPUs x run time) / (GPUs x span)
  core::Duration max_run_s = 3 * 86400;        // cap on run times and user estimates, seconds
  uint64_t seed = 2024;                        // generator seed
};

/// A generated trace with the fleet it runs on.
struct SyntheticWorkload {
  sim::Trace trace;                            // sorted, first submission at 0
  sim::Fleet fleet;
  double span_s = 0;                           // last submission time, seconds
  double offered_load = 0;                     // sum(resource x run time) / (capacity x span)
  double mean_size = 0;                        // mean processors (CPU) or GPUs per job
  double mean_run_s = 0;                       // mean actual run time, seconds
};

/// Generates the SDSC-BLUE-sized workload: sizes after Lublin & Feitelson (JPDC 2003: 24% serial;
/// parallel log2(size) two-stage uniform, 75% rounded to a power of two), log-normal run times
/// (median 1,150 s, sigma 1.9, capped), user estimate = run time x U(1,5) (capped, never below the
/// run time), Poisson arrivals whose rate gives `offered_load`. Deterministic in `options`.
SyntheticWorkload MakeBlueWorkload(const BlueOptions& options);

/// Generates the GPU workload: GPUs per job 1 (45%), 2 (12%), 4 (15%), 8 (18%), 16 (4%),
/// 32 (3%), 64 (2%), 128 (0.7%), 256 (0.3%); log-normal run times (median 1,200 s, sigma 1.7,
/// capped); estimates and arrivals as MakeBlueWorkload. Deterministic in `options`.
SyntheticWorkload MakeGpuWorkload(const GpuOptions& options);

}  // namespace mlsched::bench
