// Submit-time admission limits: the size of every field of a job spec, per-user submission rate
// and pending-job count (the policy's [limits], core::InputLimits). Pure functions and a small
// token bucket; the Controller applies them under its lock, before anything is stored.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/types.pb.h"
#include "schedd/core/types.h"
#include "schedd/server/store.h"

namespace mlsched::server {

/// "" when every field of `spec` is within `limits`; else an error naming the field, its size and
/// the limit ("script is 5242880 bytes; the limit is 4194304 (policy [limits] max_script_bytes)").
/// GPU type names (gpu_types, fallback accelerators) have at most kMaxGpuTypeBytes each.
std::string CheckSpecLimits(const v1::JobSpec& spec, const core::InputLimits& limits);

/// Longest GPU type name (bytes): in a job's gpu_types and fallback tiers, and in a registration.
inline constexpr size_t kMaxGpuTypeBytes = 64;

/// "" when the spec's numbers are in range and it has a command; else the error (the checks of
/// submission that need no policy or cluster state: ntasks 1..100000 and its elastic range,
/// CPUs and memory >= 0, GPUs per task 0..1024, time limit, checkpoint interval and data size
/// >= 0, an absolute workdir).
std::string CheckSpecValues(const v1::JobSpec& spec);

/// "" when a job's container request is what mlsub would send: a canonical image reference
/// (common/container_ref.h ParseImageRef(...).Canonical()), at most kMaxContainerMounts mounts of
/// clean absolute paths, each target once and none on /, /proc, /sys or /dev, a clean absolute
/// workdir or none, at most kMaxContainerEnvNames valid environment names; else the error.
/// Part of CheckSpecValues.
std::string CheckContainerSpec(const v1::ContainerSpec& container);

/// "" when every text field other users or admins may see or that names a path or a policy object
/// (name, workdir, output patterns, partition, account, QoS, topology, dependency, array, spot,
/// data region, GPU types, fallback accelerators, environment variable names, the container's
/// image, workdir and mount paths) is valid UTF-8
/// without control characters (C0, DEL, C1); else the error naming the field and the byte offset.
/// Environment names may not be empty or hold '='. Script, argv and environment values are not
/// checked: they are the job's own and never shown to others.
std::string CheckSpecText(const v1::JobSpec& spec);

/// "" when every GPU type the spec names (gpu_types, fallback accelerators other than "cpu") is
/// one that some node of `nodes` (registered or provisionable) has; else the error listing the
/// known types. Always "" while `nodes` is empty (nothing registered yet).
std::string CheckGpuTypesKnown(const v1::JobSpec& spec, const std::vector<core::Node>& nodes);

/// "" when an interactive job (spec.interactive, mlrun and mlalloc) is one the policy's
/// [interactive] admits: not an array, not elastic, in one of its partitions, within its max_time;
/// else the error naming the rule and its policy line. Sets the time limit of one that asked for
/// none to the smaller of the partition's default and max_time. Nothing for a batch job.
std::string CheckInteractiveSpec(v1::JobSpec& spec, const core::InteractivePolicy& policy,
                                 const core::PartitionPolicy& partition);

/// Offset of the first byte of `text` that is not printable UTF-8 (a control character, DEL, a
/// C1 control or an invalid sequence); npos when there is none.
size_t FirstNonPrintable(const std::string& text);

/// What is read back from the store is checked as if a client sent it (HA: etcd may have been
/// written by someone else). "" when `row` holds a valid spec (CheckSpecLimits, CheckSpecValues,
/// CheckSpecText), a known state, non-negative counters, and a user name that is what the
/// controller host calls its uid (`user_of_uid`, auth.h UserName); else why it is refused.
std::string CheckStoredJob(const JobRow& row, const std::string& user_of_uid, const core::InputLimits& limits);
/// The spec part of CheckStoredJob, for a spec read back at launch.
std::string CheckStoredSpec(const v1::JobSpec& spec, const core::InputLimits& limits);

/// Limits on what an agent registers (fixed: agents are authenticated, but a node's fields end up
/// in every `mladmin nodes` answer and in the store).
struct RegistrationLimits {
  static constexpr size_t kMaxNodeName = 253;     // bytes; a DNS name: letters, digits, '.', '-', '_'
  static constexpr size_t kMaxLabel = 256;        // bytes: region, zone, domain, address, version, isolation, container runtime
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
