// What this node offers: name, pool, location, CPUs, memory, GPUs by type, and the address other
// ranks use to reach it. Detection helpers fill the defaults of agentd's flags.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/units.h"

namespace mlsched::agent {

/// GPUs of one type, e.g. {"h100", 8}. Device indices are assigned in list order.
struct GpuGroup {
  std::string type;
  int64_t count = 0;
};

/// The node as agentd registers it.
struct NodeIdentity {
  std::string name;
  std::string pool = "on-demand";  // on-demand | spot | reserved
  std::string region, zone, domain;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  std::vector<GpuGroup> gpus;
  std::string address;  // MASTER_ADDR for ranks on this node
  /// Total GPU devices (indices 0..n-1).
  int32_t GpuCount() const;
};

/// The host name (gethostname), or "localhost" if it cannot be read.
std::string Hostname();
/// Hardware threads x 1000 (millicores).
int64_t DetectCpuMillis();
/// Physical memory in bytes.
int64_t DetectMemoryBytes();

/// Short lower-case model of an nvidia-smi GPU name: "NVIDIA H100 80GB HBM3" -> "h100",
/// "NVIDIA A100-SXM4-80GB" -> "a100", "Tesla V100-SXM2-16GB" -> "v100", "NVIDIA L4" -> "l4",
/// "NVIDIA GeForce RTX 4090" -> "rtx4090". Empty when no model token is found.
std::string GpuTypeFromName(const std::string& name);

/// Groups device names (one per line of nvidia-smi output) by type, keeping first-seen order.
std::vector<GpuGroup> GroupGpuNames(const std::vector<std::string>& names);

/// Runs `nvidia-smi --query-gpu=name --format=csv,noheader` when it is on PATH; empty otherwise.
std::vector<GpuGroup> DetectGpus();

/// Parses --gpus values: "TYPE:N" entries, comma-separated or repeated; "none" means no GPUs.
/// Errors name the entry, e.g. "bad --gpus entry 'h100': expected TYPE:N".
Parsed<std::vector<GpuGroup>> ParseGpuFlag(const std::vector<std::string>& values);

/// Pool name check: on-demand, spot or reserved.
bool IsValidPool(const std::string& pool);

/// True when schedd is reached over a Unix socket or a loopback host (localhost, 127.x, ::1).
bool IsLoopbackServer(const std::string& address);

}  // namespace mlsched::agent
