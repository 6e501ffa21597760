// Container Device Interface (CDI) specs: the files a node's admin (or nvidia-ctk cdi generate)
// puts in /etc/cdi and /var/run/cdi to say what a container holding a device needs: its device
// nodes, the host files to mount (the driver's libraries, programs, firmware), environment
// variables and hooks. Format: tags.cncf.io/container-device-interface SPEC.md (cdiVersion 0.3 to
// 0.8), YAML (read with libyaml) or JSON (nlohmann), both turned into one tree and read by one
// reader. Every list and string has a named limit; a file that breaks one is refused whole.
// Parsing is pure; LoadCdiSpecs reads only root-owned files nobody else can write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/units.h"

namespace mlsched::agent {

/// Limits on a CDI spec file: its size, entries in any one list (devices, env, deviceNodes,
/// mounts, hooks, args, options), one string's length, nesting depth and YAML nodes in all (the
/// last bounds alias expansion, "billion laughs").
inline constexpr size_t kMaxCdiSpecBytes = 4u << 20;
inline constexpr size_t kMaxCdiListEntries = 4096;
inline constexpr size_t kMaxCdiStringBytes = 4096;
inline constexpr size_t kMaxCdiDepth = 16;
inline constexpr size_t kMaxCdiNodes = 200000;

/// A device node a container gets: `path` in the container, `host_path` on the node (empty:
/// the same). type 'c' (character) when given; major/minor -1 and file_mode 0 when not given
/// (read from the host node then).
struct CdiDeviceNode {
  std::string path;
  std::string host_path;
  std::string type;
  int64_t major = -1;
  int64_t minor = -1;
  uint32_t file_mode = 0;
};

/// A host path mounted into a container (both absolute), with its mount options as written.
struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;
};

/// A hook the runtime would run (hookName: createContainer, prestart, ...): a program and its
/// argv (args[0] is the program's name).
struct CdiHook {
  std::string hook_name;
  std::string path;
  std::vector<std::string> args;
};

/// containerEdits: what a spec (for every device of its kind) or one device adds to a container.
struct CdiEdits {
  std::vector<std::string> env;  // "NAME=VALUE"
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  std::vector<CdiHook> hooks;
};

/// One named device of a spec ("0", "GPU-<uuid>", "all").
struct CdiDevice {
  std::string name;
  CdiEdits edits;
};

/// One spec file: its kind ("vendor/class", e.g. nvidia.com/gpu), devices and the edits common
/// to all of them.
struct CdiSpec {
  std::string file;  // where it was read from (errors and logs)
  std::string cdi_version;
  std::string kind;
  std::vector<CdiDevice> devices;
  CdiEdits edits;
};

/// Parses a spec's text; `file` names it in errors and decides the format (".json" is JSON, any
/// other name YAML). Errors: "FILE:LINE:COL: ..." for YAML syntax, "FILE: FIELD.PATH: ..." for a
/// field of the wrong type, a missing kind or device name, a relative path, or a limit broken.
/// Unknown fields are ignored (later spec versions add some).
Parsed<CdiSpec> ParseCdiSpec(std::string_view text, const std::string& file);

/// Reads every *.yaml, *.yml and *.json file of `dirs` (missing directories are skipped), in
/// order, each file's name sorted within its directory. A directory or file that is not root's, or
/// that group or others may write, is refused (a user who could write a spec could mount any host
/// file into every GPU job); so is a file over kMaxCdiSpecBytes or one that does not parse. The
/// reasons go to `*errors`; the specs that pass are returned.
std::vector<CdiSpec> LoadCdiSpecs(const std::vector<std::string>& dirs, std::vector<std::string>* errors);

}  // namespace mlsched::agent
