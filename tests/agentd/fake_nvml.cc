// A stand-in for libnvidia-ml.so.1 in tests (no GPU here): the NVML calls agentd makes, answered
// from the file named by $MLSCHED_FAKE_NVML, read at every call, one line per device in NVML's
// order: "MINOR UTIL_PERCENT MEMORY_USED MEMORY_TOTAL [ECC_UNCORRECTED RETIRED_PENDING PCI LOST [POWER_MW]]"
// (bytes; PCI as "0000:3b:00"; LOST 1 = the GPU has fallen off the bus: its queries fail with
// NVML_ERROR_GPU_IS_LOST; without POWER_MW nvmlDeviceGetPowerUsage is NOT_SUPPORTED). A missing
// file: nvmlInit fails. "%n" in the path: the agent's --name (one file per node).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

struct Dev {
  unsigned minor, util;
  unsigned long long used, total, ecc;
  unsigned pending, domain, bus, device, lost;
  int power_mw;  // -1: not supported
};
Dev g_devs[16];

// "%n" in $MLSCHED_FAKE_NVML becomes the value of the process' --name argument (agentd's node
// name, read from /proc/self/cmdline): agents of one local cluster each read a file of their own.
std::string PathOf(const char* pattern) {
  std::string path = pattern;
  const size_t at = path.find("%n");
  if (at == std::string::npos) return path;
  std::string name, cmdline;
  if (FILE* c = std::fopen("/proc/self/cmdline", "r")) {
    char buf[4096];
    size_t n = std::fread(buf, 1, sizeof buf, c);
    cmdline.assign(buf, n);
    std::fclose(c);
  }
  for (size_t i = 0; i < cmdline.size();) {
    const std::string arg = cmdline.c_str() + i;
    i += arg.size() + 1;
    if (arg == "--name" && i < cmdline.size()) name = cmdline.c_str() + i;
  }
  return path.replace(at, 2, name);
}

int Load() {
  const char* pattern = std::getenv("MLSCHED_FAKE_NVML");
  FILE* f = pattern ? std::fopen(PathOf(pattern).c_str(), "r") : nullptr;
  if (!f) return -1;
  int n = 0;
  char line[256];
  while (n < 16 && std::fgets(line, sizeof line, f)) {
    Dev d{};
    if (std::sscanf(line, "%u %u %llu %llu", &d.minor, &d.util, &d.used, &d.total) != 4) continue;
    d.power_mw = -1;
    std::sscanf(line, "%*u %*u %*u %*u %llu %u %x:%x:%x %u %d", &d.ecc, &d.pending, &d.domain, &d.bus, &d.device, &d.lost,
                &d.power_mw);
    g_devs[n++] = d;
  }
  std::fclose(f);
  return n;
}

}  // namespace

extern "C" {
struct Utilization {
  unsigned gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
int nvmlInit_v2() { return Load() < 0 ? 9 : 0; }  // 9: NVML_ERROR_DRIVER_NOT_LOADED
int nvmlShutdown() { return 0; }
int nvmlDeviceGetCount_v2(unsigned* count) {
  const int n = Load();
  if (n < 0) return 9;
  *count = static_cast<unsigned>(n);
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev) {
  if (i >= 16) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *dev = &g_devs[i];
  return 0;
}
int nvmlDeviceGetMinorNumber(void* dev, unsigned* minor) {
  Load();
  *minor = static_cast<Dev*>(dev)->minor;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* dev, Utilization* u) {
  Load();
  if (static_cast<Dev*>(dev)->lost) return 15;  // NVML_ERROR_GPU_IS_LOST
  u->gpu = static_cast<Dev*>(dev)->util;
  u->memory = 0;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* dev, Memory* m) {
  Load();
  if (static_cast<Dev*>(dev)->lost) return 15;
  m->used = static_cast<Dev*>(dev)->used;
  m->total = static_cast<Dev*>(dev)->total;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPciInfo_v3(void* dev, PciInfo* p) {
  Load();
  std::memset(p, 0, sizeof *p);
  p->domain = static_cast<Dev*>(dev)->domain;
  p->bus = static_cast<Dev*>(dev)->bus;
  p->device = static_cast<Dev*>(dev)->device;
  std::snprintf(p->bus_id, sizeof p->bus_id, "%08X:%02X:%02X.0", p->domain, p->bus, p->device);
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void* dev, int type, int counter, unsigned long long* count) {
  Load();
  if (type != 1 || counter != 0) return 3;  // only volatile uncorrected: NVML_ERROR_NOT_SUPPORTED otherwise
  *count = static_cast<Dev*>(dev)->ecc;
  return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void* dev, int* pending) {
  Load();
  *pending = static_cast<int>(static_cast<Dev*>(dev)->pending);
  return 0;
}
int nvmlDeviceGetPowerUsage(void* dev, unsigned* mw) {
  Load();
  if (static_cast<Dev*>(dev)->lost) return 15;
  if (static_cast<Dev*>(dev)->power_mw < 0) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *mw = static_cast<unsigned>(static_cast<Dev*>(dev)->power_mw);
  return 0;
}
const char* nvmlErrorString(int r) {
  return r == 9 ? "Driver Not Loaded" : r == 15 ? "GPU is lost" : "Unknown Error";
}
}
