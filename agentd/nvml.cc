#include "agentd/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>

namespace mlsched::agent {

namespace {
// NVML's ABI (nvml.h): nvmlReturn_t is an int enum, 0 = NVML_SUCCESS; nvmlDevice_t an opaque pointer.
using Return = int;
using Device = void*;
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct PciInfo {  // nvmlPciInfo_t of nvmlDeviceGetPciInfo_v3
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
constexpr int kUncorrected = 1;              // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatile = 0;                 // NVML_VOLATILE_ECC
constexpr int32_t kMaxGpus = 4096;  // RegistrationLimits::kMaxGpusPerType
}  // namespace

struct Nvml::Api {
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  Return (*count)(unsigned int*) = nullptr;
  Return (*by_index)(unsigned int, Device*) = nullptr;
  Return (*utilization)(Device, Utilization*) = nullptr;
  Return (*memory)(Device, Memory*) = nullptr;
  Return (*power)(Device, unsigned int*) = nullptr;  // nvmlDeviceGetPowerUsage: milliwatts
  Return (*minor)(Device, unsigned int*) = nullptr;
  Return (*pci)(Device, PciInfo*) = nullptr;
  Return (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  Return (*retired_pending)(Device, int*) = nullptr;
  Return (*remapped)(Device, unsigned int*, unsigned int*, unsigned int*, unsigned int*) = nullptr;
  const char* (*error)(Return) = nullptr;
  std::string Error(Return r) const {
    const char* e = error ? error(r) : nullptr;
    return e ? std::string(e).substr(0, 200) : "NVML error " + std::to_string(r);
  }
};

std::unique_ptr<Nvml> Nvml::Load(const std::string& library, std::string* why, bool* absent) {
  if (absent) *absent = false;
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    *why = "cannot load " + library + ": " + (e ? e : "unknown error");
    if (absent) *absent = true;
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->handle_ = h;
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  auto sym = [h](const char* name) { return dlsym(h, name); };
  a.init = reinterpret_cast<Return (*)()>(sym("nvmlInit_v2"));
  a.shutdown = reinterpret_cast<Return (*)()>(sym("nvmlShutdown"));
  a.count = reinterpret_cast<Return (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
  a.by_index = reinterpret_cast<Return (*)(unsigned int, Device*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  a.utilization = reinterpret_cast<Return (*)(Device, Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
  a.memory = reinterpret_cast<Return (*)(Device, Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
  a.power = reinterpret_cast<Return (*)(Device, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
  a.minor = reinterpret_cast<Return (*)(Device, unsigned int*)>(sym("nvmlDeviceGetMinorNumber"));
  a.error = reinterpret_cast<const char* (*)(Return)>(sym("nvmlErrorString"));
  a.pci = reinterpret_cast<Return (*)(Device, PciInfo*)>(sym("nvmlDeviceGetPciInfo_v3"));
  a.ecc = reinterpret_cast<Return (*)(Device, int, int, unsigned long long*)>(sym("nvmlDeviceGetTotalEccErrors"));
  a.retired_pending = reinterpret_cast<Return (*)(Device, int*)>(sym("nvmlDeviceGetRetiredPagesPendingStatus"));
  a.remapped = reinterpret_cast<Return (*)(Device, unsigned int*, unsigned int*, unsigned int*, unsigned int*)>(
      sym("nvmlDeviceGetRemappedRows"));
  if (!a.init || !a.shutdown || !a.count || !a.by_index || !a.utilization || !a.memory) {
    *why = library + " lacks the NVML functions agentd needs";
    a.shutdown = nullptr;  // never initialized
    return nullptr;
  }
  if (Return r = a.init(); r != 0) {
    *why = "nvmlInit: " + a.Error(r);
    a.shutdown = nullptr;
    return nullptr;
  }
  unsigned int count = 0;
  if (Return r = a.count(&count); r != 0) {
    *why = "nvmlDeviceGetCount: " + a.Error(r);
    return nullptr;
  }
  count = std::min<unsigned int>(count, kMaxGpus);
  std::vector<Device> by_nvml(count, nullptr);
  std::vector<unsigned int> minors(count, 0);
  bool have_minors = a.minor != nullptr;
  for (unsigned int i = 0; i < count; ++i) {
    if (Return r = a.by_index(i, &by_nvml[i]); r != 0) {
      *why = "nvmlDeviceGetHandleByIndex(" + std::to_string(i) + "): " + a.Error(r);
      return nullptr;
    }
    have_minors = have_minors && a.minor(by_nvml[i], &minors[i]) == 0 && minors[i] < static_cast<unsigned int>(kMaxGpus);
  }
  // This node's GPU index i is /dev/nvidia<i>: the device of minor number i.
  n->devices_ = by_nvml;
  if (have_minors) {
    unsigned int top = 0;
    for (unsigned int m : minors) top = std::max(top, m);
    n->devices_.assign(top + 1, nullptr);
    for (unsigned int i = 0; i < count; ++i) n->devices_[minors[i]] = by_nvml[i];
  }
  n->pci_.assign(n->devices_.size(), Pci{});
  for (size_t i = 0; i < n->devices_.size() && a.pci; ++i) {
    PciInfo info{};
    if (n->devices_[i] && a.pci(n->devices_[i], &info) == 0) n->pci_[i] = Pci{info.domain, info.bus, info.device, true};
  }
  return n;
}

std::optional<uint32_t> Nvml::CountNow(std::string* why) const {
  unsigned int count = 0;
  if (Return r = api_->count(&count); r != 0) {
    *why = "nvmlDeviceGetCount: " + api_->Error(r);
    return std::nullopt;
  }
  return count;
}

int32_t Nvml::IndexOfPci(uint32_t domain, uint32_t bus, uint32_t device) const {
  for (size_t i = 0; i < pci_.size(); ++i)
    if (pci_[i].known && pci_[i].domain == domain && pci_[i].bus == bus && pci_[i].device == device)
      return static_cast<int32_t>(i);
  return -1;
}

Nvml::DeviceHealth Nvml::Health(int32_t index) const {
  DeviceHealth h;
  if (index < 0 || static_cast<size_t>(index) >= devices_.size() || !devices_[static_cast<size_t>(index)]) {
    h.error = "not known to NVML";
    return h;
  }
  Device d = devices_[static_cast<size_t>(index)];
  Utilization u{};
  if (Return r = api_->utilization(d, &u); r != 0) {  // GPU_IS_LOST, UNKNOWN, ...: it cannot be used
    h.error = api_->Error(r);
    return h;
  }
  unsigned long long ecc = 0;
  if (api_->ecc && api_->ecc(d, kUncorrected, kVolatile, &ecc) == 0) h.ecc_uncorrected = ecc;
  int pending = 0;
  if (api_->retired_pending && api_->retired_pending(d, &pending) == 0) h.retired_pages_pending = pending != 0;
  unsigned int corrected = 0, uncorrected = 0, remap_pending = 0, failed = 0;
  if (api_->remapped && api_->remapped(d, &corrected, &uncorrected, &remap_pending, &failed) == 0)
    h.row_remap_failure = failed != 0;
  return h;
}

Nvml::~Nvml() {
  if (api_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

std::optional<Nvml::Sample> Nvml::Read(int32_t index, std::string* why) const {
  if (index < 0 || static_cast<size_t>(index) >= devices_.size() || !devices_[static_cast<size_t>(index)]) {
    *why = "no GPU " + std::to_string(index) + " in NVML";
    return std::nullopt;
  }
  Device d = devices_[static_cast<size_t>(index)];
  Utilization u{};
  Memory m{};
  if (Return r = api_->utilization(d, &u); r != 0) {
    *why = "GPU " + std::to_string(index) + ": nvmlDeviceGetUtilizationRates: " + api_->Error(r);
    return std::nullopt;
  }
  if (Return r = api_->memory(d, &m); r != 0) {
    *why = "GPU " + std::to_string(index) + ": nvmlDeviceGetMemoryInfo: " + api_->Error(r);
    return std::nullopt;
  }
  Sample s{std::min(u.gpu, 100u), m.used, m.total, std::nullopt};
  unsigned int mw = 0;
  if (api_->power && api_->power(d, &mw) == 0) s.power_mw = mw;
  return s;
}

std::optional<Nvml::Sample> Nvml::ReadAll(const std::vector<int32_t>& indices) const {
  Sample sum;
  uint64_t util = 0, read = 0, power = 0;
  bool all_power = true;
  for (int32_t i : indices) {
    std::string why;
    auto s = Read(i, &why);
    if (!s) continue;
    util += s->util_percent;
    if (s->power_mw) power += *s->power_mw;
    else all_power = false;
    sum.memory_used += s->memory_used;
    sum.memory_total += s->memory_total;
    ++read;
  }
  if (read == 0) return std::nullopt;
  sum.util_percent = static_cast<uint32_t>(util / read);
  if (all_power) sum.power_mw = static_cast<uint32_t>(std::min<uint64_t>(power, UINT32_MAX));
  return sum;
}

std::vector<int32_t> GpuIndicesOf(const std::vector<std::string>& env) {
  std::vector<int32_t> out;
  for (const auto& kv : env) {
    if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) != 0) continue;
    out.clear();
    const std::string v = kv.substr(21);
    size_t pos = 0;
    while (pos <= v.size()) {
      size_t comma = v.find(',', pos);
      if (comma == std::string::npos) comma = v.size();
      const std::string item = v.substr(pos, comma - pos);
      if (!item.empty() && item.size() <= 4 && std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        out.push_back(std::stoi(item));
      pos = comma + 1;
    }
  }
  return out;
}

}  // namespace mlsched::agent
