// The simulated fleet: nodes plus what only a simulation needs (spot eviction rates).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::sim {

/// Nodes and, per node (same index), the seeded spot-eviction process parameters.
struct Fleet {
  std::vector<core::Node> nodes;
  std::vector<double> eviction_rate_per_hour;  // mean evictions per node-hour; 0 = never
  std::vector<core::Duration> recovery_s;      // an evicted node is back after this long
  /// Mean evictions per node-hour of the nodes the provisioner creates in a pool (the cluster
  /// file's [provisioned.POOL] eviction_rate_per_hour; spot only). An evicted provisioned node
  /// never recovers: the provisioner releases it.
  std::map<core::Pool, double> provisioned_eviction_rate_per_hour;
};

/// Wraps trace-provided nodes (no evictions).
Fleet FleetFromNodes(std::vector<core::Node> nodes);

/// `count` identical on-demand nodes "node-000".. with `cpus` cores, `memory_gib` GiB and `gpus`
/// GPUs of type `gpu_type` each, grouped `domain_size` nodes per topology domain (0 = one domain).
Fleet UniformFleet(int count, int cpus, int64_t memory_gib, int gpus, const std::string& gpu_type,
                   int domain_size = 0);

/// Largest eviction_rate_per_hour a cluster file may give (one eviction a minute).
inline constexpr double kMaxEvictionRatePerHour = 60.0;

/// Reads a cluster description (TOML), e.g.
///   [[nodes]]
///   prefix = "gpu"          # node names gpu-000, gpu-001, ...
///   count = 16
///   cpus = 32               # cores
///   memory_gib = 256
///   gpus = 4
///   gpu_type = "v100"
///   pool = "spot"           # on-demand (default) | spot | reserved
///   zone = "z1"             # optional; region likewise
///   domain_size = 4         # nodes per topology domain (optional)
///   eviction_rate_per_hour = 0.05   # spot only
///   recovery_s = 600
///   [provisioned.spot]      # optional: nodes the policy's [provisioning.spot] creates
///   eviction_rate_per_hour = 0.5   # 0..kMaxEvictionRatePerHour, spot only
/// Throws std::runtime_error naming the file, the table index and the bad key.
Fleet ReadClusterFile(const std::string& path);

/// Total GPUs and CPU cores of the fleet.
int64_t TotalGpus(const Fleet& fleet);
int64_t TotalCpuMillis(const Fleet& fleet);

}  // namespace mlsched::sim
