// NVML (NVIDIA's management library) through dlopen: no build dependency, nothing on CPU nodes.
// agentd reads each GPU's utilization and memory with it for the heartbeat (RunningTask
// gpu_util_percent, gpu_memory_bytes: the idle release of interactive allocations now, accounting
// and health next). Only the calls of the NVML API reference it needs, resolved by name:
// nvmlInit_v2, nvmlShutdown, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetUtilizationRates, nvmlDeviceGetMemoryInfo; optional: nvmlDeviceGetMinorNumber,
// nvmlErrorString, and for health (agentd/health.h) nvmlDeviceGetPciInfo_v3,
// nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRemappedRows. NVML is thread-safe; a call may block on a broken GPU, so callers
// read it off the heartbeat's thread (TaskProgressCache).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlsched::agent {

class Nvml {
 public:
  /// One GPU's figures now.
  struct Sample {
    uint32_t util_percent = 0;  // of the last sample period the kernel ran on the GPU (0..100)
    uint64_t memory_used = 0;   // bytes
    uint64_t memory_total = 0;  // bytes
    std::optional<uint32_t> power_mw;  // board power draw, milliwatts (summed by ReadAll); unset when unsupported
  };
  /// Loads `library` (a name dlopen searches, or a path), initializes NVML and maps GPU index i of
  /// this node (/dev/nvidia<i>, CUDA_VISIBLE_DEVICES) to the NVML device of minor number i (NVML
  /// index i when minor numbers are not available). nullptr with `*why` when the library is
  /// missing (a CPU node) or NVML fails.
  /// `*absent` (optional) is set when the library itself could not be loaded (no driver on this
  /// node), as opposed to NVML failing (a broken driver: a health problem).
  static std::unique_ptr<Nvml> Load(const std::string& library, std::string* why, bool* absent = nullptr);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  /// GPUs NVML sees.
  size_t Devices() const { return devices_.size(); }
  /// GPU `index` of this node now; nullopt with `*why` when there is no such GPU or NVML fails.
  std::optional<Sample> Read(int32_t index, std::string* why) const;
  /// The mean utilization and the summed memory use and power of GPUs `indices` (power set when
  /// every GPU read gave one); nullopt when none could be read.
  std::optional<Sample> ReadAll(const std::vector<int32_t>& indices) const;

  /// One GPU's health figures now (agentd/health.h); what NVML does not support stays unset.
  struct DeviceHealth {
    std::string error;                        // the GPU cannot be queried ("GPU is lost"); the rest unset
    std::optional<uint64_t> ecc_uncorrected;  // volatile uncorrectable ECC errors since the driver loaded
    bool retired_pages_pending = false;       // pages wait for retirement: the GPU needs a reset
    bool row_remap_failure = false;           // a row remapping failed (A100 and later)
  };
  /// GPU `index`'s health (nvmlDeviceGetUtilizationRates as the liveness probe,
  /// nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRetiredPagesPendingStatus,
  /// nvmlDeviceGetRemappedRows; the last three optional).
  DeviceHealth Health(int32_t index) const;
  /// The GPUs NVML counts now (nvmlDeviceGetCount); nullopt with `*why` when NVML fails.
  std::optional<uint32_t> CountNow(std::string* why) const;
  /// This node's GPU index of the GPU at PCI address domain:bus:device (nvmlDeviceGetPciInfo_v3,
  /// read at Load); -1 when none.
  int32_t IndexOfPci(uint32_t domain, uint32_t bus, uint32_t device) const;

 private:
  Nvml() = default;
  struct Api;
  void* handle_ = nullptr;
  std::unique_ptr<Api> api_;
  std::vector<void*> devices_;  // by this node's GPU index (nvmlDevice_t)
  struct Pci {
    uint32_t domain = 0, bus = 0, device = 0;
    bool known = false;
  };
  std::vector<Pci> pci_;  // by this node's GPU index
};

/// The GPU indices of CUDA_VISIBLE_DEVICES in `env` (NAME=VALUE entries): "0,2" -> {0, 2};
/// entries that are not small non-negative numbers (UUIDs) are left out.
std::vector<int32_t> GpuIndicesOf(const std::vector<std::string>& env);

}  // namespace mlsched::agent
