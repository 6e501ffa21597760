// A stand-in for libnvidia-ml.so.1 in tests (no GPU here): the NVML calls agentd makes, answered
// from the file named by $MLSCHED_FAKE_NVML, read at every call, one line per device in NVML's
// order: "MINOR UTIL_PERCENT MEMORY_USED MEMORY_TOTAL" (bytes). A missing file: nvmlInit fails.
#include <cstdio>
#include <cstdlib>

namespace {

struct Dev {
  unsigned minor, util;
  unsigned long long used, total;
};
Dev g_devs[16];

int Load() {
  const char* path = std::getenv("MLSCHED_FAKE_NVML");
  FILE* f = path ? std::fopen(path, "r") : nullptr;
  if (!f) return -1;
  int n = 0;
  while (n < 16 && std::fscanf(f, "%u %u %llu %llu", &g_devs[n].minor, &g_devs[n].util, &g_devs[n].used, &g_devs[n].total) == 4) ++n;
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
  u->gpu = static_cast<Dev*>(dev)->util;
  u->memory = 0;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* dev, Memory* m) {
  Load();
  m->used = static_cast<Dev*>(dev)->used;
  m->total = static_cast<Dev*>(dev)->total;
  m->free = m->total - m->used;
  return 0;
}
const char* nvmlErrorString(int r) { return r == 9 ? "Driver Not Loaded" : "Unknown Error"; }
}
