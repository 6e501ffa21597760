// Submit-time admission limits: the size of every field of a job spec, per-user submission rate
// and pending-job count (the policy's [limits], core::InputLimits). Pure functions and a small
// token bucket; the Controller applies them under its lock, before anything is stored.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/types.pb.h"
#include "schedd/core/types.h"

namespace mlsched::server {

/// "" when every field of `spec` is within `limits`; else an error naming the field, its size and
/// the limit ("script is 5242880 bytes; the limit is 4194304 (policy [limits] max_script_bytes)").
std::string CheckSpecLimits(const v1::JobSpec& spec, const core::InputLimits& limits);

/// Limits on what an agent registers (fixed: agents are authenticated, but a node's fields end up
/// in every `mladmin nodes` answer and in the store).
struct RegistrationLimits {
  static constexpr size_t kMaxNodeName = 253;     // bytes; a DNS name: letters, digits, '.', '-', '_'
  static constexpr size_t kMaxLabel = 256;        // bytes: region, zone, domain, address, version, isolation
  static constexpr int kMaxGpuTypes = 64;         // entries in capacity.gpus
  static constexpr int32_t kMaxGpusPerType = 4096;
  static constexpr int kMaxRunningTasks = 100000; // entries in running
  static constexpr int kMaxCutoffSeconds = 86400;  // RegisterNode.cutoff_timeout_s (one day)
};

/// "" when `reg` is within RegistrationLimits and its numbers are >= 0; else an error naming the
/// field and the limit ("node name '...' has 300 bytes; the limit is 253").
std::string CheckRegistration(const v1::RegisterNode& reg);

/// Per-user token buckets for submissions: each user may submit `submit_rate_per_user` requests a
/// second on average and `submit_burst_per_user` at once (the shape of Slurm's rl_* rate
/// limiting). Time in whole seconds from the caller (the core's clock rule: no wall clock here).
class SubmitRateLimiter {
 public:
  /// Takes one token for `user` at `now`; false when the bucket is empty (the request is refused
  /// and takes nothing). A rate of 0 disables the limit.
  bool Take(const std::string& user, int64_t now, const core::InputLimits& limits);

 private:
  struct Bucket {
    double tokens = 0;
    int64_t last = 0;
  };
  std::map<std::string, Bucket> buckets_;
};

}  // namespace mlsched::server
