// What a container holding GPUs gets from the node's CDI specs (cdi_spec.h), in place of the
// ldconfig-based driver files (gpu_driver_files.h) when the node has a spec of kind
// nvidia.com/gpu: the device nodes, read-only mounts and environment of the spec and of the
// rank's devices, and the effect of the NVIDIA toolkit's hooks. agentd runs no hook program: a
// hook is a root program run in the container's namespaces before its root is read-only, and the
// bundle's root is read-only by then (container_bundle.h). It does what nvidia-ctk's hooks
// (nvidia-ctk hook SUB, nvidia-cdi-hook SUB) do, itself:
//   create-symlinks --link TARGET::LINK   the symlink, made in the task's overlay (MakeInRoot)
//   update-ldcache --folder DIR           DIR appended to LD_LIBRARY_PATH, and the mounted
//   create-soname-symlinks --folder DIR   libraries' SONAME links made (the names the host's
//                                         `ldconfig -p` gives the same files), as ldconfig would
//   chmod                                 nothing: runc makes /dev's directories 0755
// Any other hook (enable-cuda-compat, disable-device-node-modification, a vendor's program) is
// left out, and said so once at start (UnsupportedHooks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agentd/cdi_spec.h"
#include "agentd/container_bundle.h"
#include "agentd/gpu_driver_files.h"
#include "agentd/oci_spec.h"

namespace mlsched::agent {

/// The CDI kind whose devices are a node's GPUs.
inline constexpr const char* kCdiGpuKind = "nvidia.com/gpu";

/// A node's CDI state, read once at agentd's start: the specs of kind kCdiGpuKind and, for the
/// SONAME links, the names the host's dynamic linker cache gives each resolved library path.
struct CdiCatalog {
  std::vector<CdiSpec> specs;
  std::multimap<std::string, std::string> sonames;  // resolved host path -> "libcuda.so.1", ...
};

/// The catalog of `specs` (those of other kinds dropped) with `ld_cache` (ParseLdCache) indexed
/// by each entry's resolved path. Empty specs when none is of kCdiGpuKind.
CdiCatalog MakeCdiCatalog(std::vector<CdiSpec> specs, const std::vector<LdCacheEntry>& ld_cache);

/// A symlink made in the container's root: `link` (absolute) pointing at `target` (as written).
struct CdiSymlink {
  std::string link;
  std::string target;
};

/// Everything one rank's container gets from the catalog.
struct CdiPlan {
  std::vector<OciDevice> devices;
  std::vector<DriverFile> mounts;  // host path resolved and checked (CheckCdiHostPath), bound read-only
  std::vector<bool> mount_is_dir;  // parallel to mounts
  std::vector<CdiSymlink> symlinks;
  std::vector<std::string> env;           // "NAME=VALUE", later entries win
  std::vector<std::string> library_dirs;  // for LD_LIBRARY_PATH, in order
};

/// The plan for a rank holding `gpus` (its device nodes, /dev/nvidiaN) on a node where `denied`
/// are the other ranks' GPUs. For each GPU the device of the catalog whose device nodes (host
/// paths) include it and are fewest (so "0", not "all"); its spec's common edits and its own are
/// merged. Errors (the task fails with them, nothing is half-applied): a GPU no device has, a
/// chosen device that also holds a denied GPU, a device node that is not a character device, a
/// mount whose host path fails CheckCdiHostPath or whose container path is "/", not clean, or
/// below /proc, /sys or /dev.
Parsed<CdiPlan> PlanCdi(const CdiCatalog& catalog, const std::vector<std::string>& gpus,
                        const std::vector<std::string>& denied);

/// Why root should not bind host `path` into containers ("" when it may): its resolved target
/// must be root's, and a regular file or directory nobody else can write, or a socket (the
/// driver's persistenced and fabric manager sockets). `*resolved` gets the target's path, and
/// `*is_dir` whether it is a directory.
std::string CheckCdiHostPath(const std::string& path, std::string* resolved, bool* is_dir);

/// The catalog's hooks agentd does not reproduce, one line each ("FILE: devices[...]: nvidia-cdi-hook
/// enable-cuda-compat"), for agentd's start-up log.
std::vector<std::string> UnsupportedHooks(const CdiCatalog& catalog);

/// Applies `plan` to a task's spec: its devices replace spec->devices, its mounts are added to
/// spec->binds (read-only) and `points`, its symlinks to `points`, its environment set (a name
/// already there is replaced), its library directories appended to LD_LIBRARY_PATH.
void ApplyCdiPlan(const CdiPlan& plan, OciTaskSpec* spec, std::vector<MountPoint>* points);

}  // namespace mlsched::agent
