#pragma once
// A job's container request as mlsub takes it (pyxis's option names): the image reference, the
// bind mounts and the environment names, parsed and checked the same way by mlsub (early errors)
// and by schedd (the check that counts). Pure: no I/O, no registry lookups.

#include <cstddef>
#include <string>
#include <vector>

namespace mlsched {

/// Named limits of a container request.
inline constexpr size_t kMaxImageRefBytes = 1024;      // the whole --container-image text
inline constexpr size_t kMaxImageNameBytes = 255;      // REGISTRY/REPOSITORY (distribution's NameTotalLengthMax)
inline constexpr size_t kMaxImageTagBytes = 128;       // distribution's tag grammar: [\w][\w.-]{0,127}
inline constexpr size_t kMaxContainerPathBytes = 4096; // PATH_MAX: a mount's source or target, a workdir, an archive
inline constexpr size_t kMaxContainerMounts = 64;      // entries of --container-mounts
inline constexpr size_t kMaxContainerEnvNames = 256;   // names in --container-env
inline constexpr size_t kMaxEnvNameBytes = 256;        // one environment variable name
inline constexpr int kMaxPrepareEvents = 16;           // PrepareResult.events kept per node and attempt
inline constexpr size_t kMaxPrepareEventBytes = 1024;  // one of them, or a prepare error

/// Where an image comes from (containers/image's transports, the subset a node may use).
enum class ImageTransport {
  kDocker,         // docker://[REGISTRY/]NAME[:TAG][@sha256:DIGEST]: pulled from a registry
  kOciArchive,     // oci-archive:PATH[:REF]: a tar of an OCI image layout on the node
  kDockerArchive,  // docker-archive:PATH: a `docker save` tar on the node
  kOciLayout,      // oci:DIR[:TAG]: an OCI image layout directory on the node (e.g. a shared filesystem)
};

/// A parsed image reference. Docker references are normalized as docker does: no registry means
/// docker.io, a one-component name on docker.io gets "library/", no tag and no digest means
/// "latest".
struct ImageRef {
  ImageTransport transport = ImageTransport::kDocker;
  std::string registry;    // kDocker: "docker.io", "localhost:5000", "nvcr.io"
  std::string repository;  // kDocker: "library/busybox", "nvidia/pytorch"
  std::string tag;         // kDocker: the tag ("" with a digest alone); kOciArchive/kOciLayout: the reference ("" = the only one)
  std::string digest;      // kDocker: "sha256:" + 64 lowercase hex digits, or ""
  std::string path;        // archives and layouts: the absolute path on the node

  /// The canonical text, in skopeo's syntax: docker://REGISTRY/REPOSITORY[:TAG][@DIGEST],
  /// oci-archive:PATH[:REF], docker-archive:PATH, oci:DIR[:TAG]. ParseImageRef of it gives the
  /// same ImageRef.
  std::string Canonical() const;
};

/// Parses IMAGE as `mlsub --container-image` takes it: the four transports above; a reference
/// without a transport is a docker one (`ubuntu:22.04`, `nvcr.io/nvidia/pytorch:24.05-py3`), and
/// enroot's `REGISTRY#NAME` spelling (pyxis: `nvcr.io#nvidia/pytorch:24.05-py3`) is accepted.
/// Refused, with the reason: other transports (dir:, containers-storage:, ...), credentials in
/// the reference (`user@`), upper-case or malformed names, tags and digests (only sha256),
/// relative or non-canonical paths, paths holding ':' (skopeo splits there), anything over the
/// limits above. Returns "" and fills *out, or the error (nothing is written then).
std::string ParseImageRef(const std::string& text, ImageRef* out);

/// One bind mount of a container: `source` on the node onto `target` in the container.
struct ContainerMountSpec {
  std::string source;
  std::string target;
  bool read_only = false;
  bool operator==(const ContainerMountSpec&) const = default;
};

/// Parses `--container-mounts SRC[:DST[:ro|rw]],...` (pyxis's syntax; DST defaults to SRC, the
/// mode to rw). Sources and targets pass CheckContainerPath, targets CheckMountTarget; at most
/// kMaxContainerMounts entries, no target twice. Returns "" or the error naming the entry.
std::string ParseContainerMounts(const std::string& text, std::vector<ContainerMountSpec>* out);

/// An absolute, lexically clean path: starts with '/', no "." or ".." component, no empty
/// component ("//"), no trailing '/' (except "/" itself), no ',' or ':' (list and field
/// separators) and no control character; at most kMaxContainerPathBytes. `what` names the field
/// in the error ("mount source", "container workdir").
std::string CheckContainerPath(const std::string& what, const std::string& path);

/// One mount as ParseContainerMounts accepts it, after the mounts `before` it: clean absolute
/// source and target (CheckContainerPath), a target CheckMountTarget allows and none of `before`
/// has. Returns "" or the error. schedd checks an API client's mounts with it.
std::string CheckContainerMount(const ContainerMountSpec& mount, const std::vector<ContainerMountSpec>& before);

/// A mount target the runtime may bind onto: not "/" and not /proc, /sys or /dev or below them
/// (the runtime mounts its own there).
std::string CheckMountTarget(const std::string& target);

/// Parses `--container-env NAME,...`: the job-environment variables that override the image's.
/// Names are [A-Za-z_][A-Za-z0-9_]*, at most kMaxEnvNameBytes each and kMaxContainerEnvNames in
/// all; duplicates are dropped.
std::string ParseContainerEnvNames(const std::string& text, std::vector<std::string>* out);

/// Checks one environment variable name as ParseContainerEnvNames does.
std::string CheckEnvName(const std::string& name);

}  // namespace mlsched
