#include "agentd/gpu_driver_files.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <set>
#include <sstream>

#include "agentd/container_tools.h"

namespace mlsched::agent {
namespace {

bool Is64Bit(const std::string& flags) {
  return flags.find("x86-64") != std::string::npos || flags.find("AArch64") != std::string::npos;
}

bool SafeName(const std::string& name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

}  // namespace

std::vector<LdCacheEntry> ParseLdCache(std::string_view text) {
  std::vector<LdCacheEntry> out;
  size_t lines = 0;
  while (!text.empty() && lines++ < kMaxLdCacheLines) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.size() > kMaxLdCacheLineBytes) continue;
    // "\tNAME (FLAGS) => PATH" (a hwcap or OS ABI may follow the flags inside the parentheses)
    const size_t open = line.find(" (");
    const size_t close = line.find(") => ");
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) continue;
    LdCacheEntry e;
    std::string_view name = line.substr(0, open);
    while (!name.empty() && (name.front() == '\t' || name.front() == ' ')) name.remove_prefix(1);
    e.name = std::string(name);
    e.flags = std::string(line.substr(open + 2, close - open - 2));
    e.path = std::string(line.substr(close + 5));
    if (!SafeName(e.name) || e.path.empty() || e.path.front() != '/') continue;
    out.push_back(std::move(e));
  }
  return out;
}

const std::vector<std::string>& DriverLibraryNames() {
  // The compute and utility libraries of NVIDIA's container toolkit (libnvidia-container's
  // library lists): what CUDA, NVML and NCCL programs load from the driver.
  static const std::vector<std::string> names = {
      "libcuda.so",          "libcudadebugger.so",        "libnvidia-ml.so",        "libnvidia-cfg.so",
      "libnvidia-nvvm.so",   "libnvidia-ptxjitcompiler.so", "libnvidia-gpucomp.so", "libnvidia-allocator.so",
      "libnvidia-opencl.so", "libnvidia-compiler.so",     "libnvidia-fatbinaryloader.so", "libnvidia-pkcs11.so",
      "libnvidia-pkcs11-openssl3.so", "libnvidia-nscq.so"};
  return names;
}

std::vector<DriverFile> SelectDriverLibraries(const std::vector<LdCacheEntry>& entries) {
  std::vector<DriverFile> out;
  std::set<std::string> seen;
  for (const auto& e : entries) {
    if (!Is64Bit(e.flags) || seen.count(e.name)) continue;
    bool wanted = false;
    for (const auto& prefix : DriverLibraryNames())
      if (e.name == prefix || e.name.rfind(prefix + ".", 0) == 0) wanted = true;
    if (!wanted) continue;
    seen.insert(e.name);
    out.push_back({e.path, std::string(kContainerDriverLibDir) + "/" + e.name});
  }
  return out;
}

std::vector<DriverFile> FindDriverPrograms(const std::string& path_list) {
  std::vector<DriverFile> out;
  for (const char* name : {"nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}) {
    std::stringstream dirs(path_list);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      if (dir.empty() || dir.front() != '/') continue;
      const std::string p = dir + "/" + name;
      if (access(p.c_str(), X_OK) == 0) {
        out.push_back({p, std::string(kContainerDriverBinDir) + "/" + name});
        break;
      }
    }
  }
  return out;
}

std::string CheckDriverFile(const std::string& path, std::string* resolved) {
  char buf[PATH_MAX];
  if (!realpath(path.c_str(), buf)) return path + ": cannot resolve it";
  struct stat st{};
  if (lstat(buf, &st) != 0) return std::string(buf) + ": cannot stat it";
  if (!S_ISREG(st.st_mode)) return std::string(buf) + ": not a regular file";
  if (st.st_uid != 0) return std::string(buf) + ": not owned by root";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return std::string(buf) + ": writable by group or others";
  *resolved = buf;
  return "";
}

std::vector<LdCacheEntry> ReadHostLdCache() {
  std::string ldconfig;
  for (const char* p : {"/sbin/ldconfig", "/usr/sbin/ldconfig"})
    if (access(p, X_OK) == 0) {
      ldconfig = p;
      break;
    }
  if (ldconfig.empty()) {
    spdlog::warn("containers: no ldconfig: the GPU driver's libraries are not found");
    return {};
  }
  const ToolResult r = RunTool({ldconfig, "-p"}, {"PATH=" + std::string(kContainerToolPath)},
                               std::chrono::seconds(10), 8u << 20);
  if (!r.Ok()) spdlog::warn("containers: {} -p failed: {}", ldconfig, r.error.empty() ? r.Reason() : r.error);
  return ParseLdCache(r.output);
}

std::vector<DriverFile> DetectGpuDriverFiles(const std::vector<LdCacheEntry>& ld_cache) {
  std::vector<DriverFile> found = SelectDriverLibraries(ld_cache);
  for (auto& f : FindDriverPrograms(kContainerToolPath)) found.push_back(std::move(f));
  std::vector<DriverFile> out;
  for (auto& f : found) {
    std::string target;
    if (auto why = CheckDriverFile(f.host_path, &target); !why.empty()) {
      spdlog::warn("containers: GPU driver file left out: {}", why);
      continue;
    }
    out.push_back({target, f.container_path});
  }
  return out;
}

}  // namespace mlsched::agent
