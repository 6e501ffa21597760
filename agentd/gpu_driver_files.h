// The host GPU driver's user-space files that a container holding GPUs needs: libcuda,
// libnvidia-ml and the other libraries of the driver (they must match the kernel module, so they
// come from the host, never from the image), and its utility programs (nvidia-smi). Found the way
// NVIDIA's container toolkit finds them: the libraries through the dynamic linker's cache
// (`ldconfig -p`), the programs on the system PATH. agentd binds them read-only at the paths NVIDIA's
// CUDA images and GKE use: /usr/local/nvidia/lib64 (on the images' LD_LIBRARY_PATH) and
// /usr/local/nvidia/bin.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mlsched::agent {

/// Where the driver's libraries and programs appear in a container.
inline constexpr const char* kContainerDriverLibDir = "/usr/local/nvidia/lib64";
inline constexpr const char* kContainerDriverBinDir = "/usr/local/nvidia/bin";

/// Limits on `ldconfig -p`'s output: lines read (the rest ignored) and one line's length (longer
/// lines are skipped).
inline constexpr size_t kMaxLdCacheLines = 65536;
inline constexpr size_t kMaxLdCacheLineBytes = 4096;

/// One line of `ldconfig -p`: "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1".
struct LdCacheEntry {
  std::string name;   // "libcuda.so.1"
  std::string flags;  // "libc6,x86-64"
  std::string path;   // absolute
};

/// The entries of `ldconfig -p`'s output; lines that do not parse (the header, over-long ones,
/// a relative path) are skipped.
std::vector<LdCacheEntry> ParseLdCache(std::string_view text);

/// A host file bound read-only into containers.
struct DriverFile {
  std::string host_path;       // absolute, on the host
  std::string container_path;  // absolute, clean: kContainerDriverLibDir/NAME or kContainerDriverBinDir/NAME
};

/// The driver's libraries among `entries`: names that start with one of the compute and utility
/// libraries NVIDIA's container toolkit mounts (libcuda.so, libnvidia-ml.so, libnvidia-ptxjitcompiler.so,
/// ...; DriverLibraryNames()), 64-bit (flags naming x86-64 or AArch64) only, each name once (the
/// first, as the dynamic linker would pick), at kContainerDriverLibDir/NAME.
std::vector<DriverFile> SelectDriverLibraries(const std::vector<LdCacheEntry>& entries);

/// The library name prefixes SelectDriverLibraries takes ("libcuda.so", ...).
const std::vector<std::string>& DriverLibraryNames();

/// The driver's programs (nvidia-smi, nvidia-debugdump, nvidia-cuda-mps-control,
/// nvidia-cuda-mps-server) found in `path_list` (colon-separated directories), at
/// kContainerDriverBinDir/NAME.
std::vector<DriverFile> FindDriverPrograms(const std::string& path_list);

/// Why root should not bind `path` into containers ("" when it may): its final target must be a
/// regular file owned by root, not writable by group or others (a file a user could replace or
/// write would reach every GPU job on the node). `*resolved` gets the target's path.
std::string CheckDriverFile(const std::string& path, std::string* resolved);

/// The host's dynamic linker cache: `ldconfig -p` run as a helper with a 10 s limit, parsed.
/// Empty (with a warning) when ldconfig is missing or fails.
std::vector<LdCacheEntry> ReadHostLdCache();

/// This node's driver files: `ld_cache` (ReadHostLdCache) filtered by SelectDriverLibraries, plus
/// FindDriverPrograms on the system PATH, each checked with CheckDriverFile (a failing one is
/// left out with a warning) and bound from its resolved target. Empty on a node without the
/// NVIDIA driver. Read once at start: a driver upgrade needs an agentd restart, as it needs a
/// reboot for the kernel module anyway.
std::vector<DriverFile> DetectGpuDriverFiles(const std::vector<LdCacheEntry>& ld_cache);

}  // namespace mlsched::agent
