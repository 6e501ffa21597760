// The node's image cache (agentd, root): container images fetched with skopeo, unpacked with
// umoci, kept under <dir>/images/<hex of the manifest digest>/rootfs, once per digest however many
// tasks ask at the same time, and evicted least recently used beyond a size limit. Images are
// pulled by digest (a tag is first resolved to the digest it names), so skopeo checks the manifest
// against the digest and every blob against the manifest: a tampered blob fails the pull. Root
// never honours what a layer holds: device nodes are removed and setuid/setgid bits cleared after
// unpacking (umoci itself refuses paths escaping the root), and the tasks' root is mounted
// nosuid,nodev on top (container_bundle.h). Registry credentials: anonymous (--src-no-creds):
// root's own credentials are never used for a user's image.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agentd/container_tools.h"
#include "common/container_ref.h"
#include "common/units.h"

namespace mlsched::agent {

/// Largest image runtime config read (bytes; umoci's config.json from the image's config blob,
/// which the image's author controls). Real images' are a few KiB.
inline constexpr int64_t kMaxImageConfigBytes = 1 << 20;
/// Deepest directory nesting accepted in a staged copy (TakeOverTree recurses per level).
inline constexpr int kMaxStagedDepth = 16;

/// Largest registry credentials file read for a pull (bytes).
inline constexpr size_t kMaxAuthFileBytes = 1 << 20;

/// Settings of the cache (agentd --image-cache, --image-cache-size, --image-cert-dir).
struct ImageCacheConfig {
  std::string dir;               // absolute; made mode 0700; images/ and tmp/ inside
  int64_t max_bytes = 0;         // unpacked bytes kept (images in use are never evicted); 0 = no limit
  std::string cert_dir;          // CA certificates of registries (skopeo --src-cert-dir); "" = the system's
  std::chrono::seconds pull_timeout{1800};  // one skopeo copy or umoci unpack
};

/// One unpacked image, shared by the tasks that run it (a live reference pins it in the cache).
struct CachedImage {
  std::string digest;                   // "sha256:<64 hex>": the manifest (or index) the reference named
  std::string dir;                      // <dir>/images/<hex>
  std::string rootfs;                   // <dir>/images/<hex>/rootfs
  std::vector<std::string> entrypoint;  // the image's Entrypoint + Cmd (from its config)
  std::vector<std::string> env;         // the image's Env ("KEY=VALUE")
  std::string workdir;                  // the image's WorkingDir ("/" when unset)
  int64_t bytes = 0;                    // unpacked size on disk
};

/// What a pull did, for the job's events and metrics.
struct PullReport {
  bool cached = false;         // found in the cache: nothing fetched
  double seconds = 0;          // fetch + unpack (or waiting for another task's pull)
  int64_t fetched_bytes = 0;   // compressed layers and config, as the registry sent them
  int removed_devices = 0;     // device nodes found in the layers and removed
  int cleared_setid = 0;       // files whose setuid/setgid bits were cleared
};

class ImageCache {
 public:
  /// Progress lines for the job's events ("image: pulling docker://... (3 layers, 812 MB)").
  using ProgressFn = std::function<void(const std::string&)>;

  ImageCache(ImageCacheConfig config, ContainerTools tools);

  /// Makes the directories (mode 0700), removes what an interrupted pull left in tmp/, and adopts
  /// the complete images already there. Returns "" or the error naming the path.
  std::string Init();

  /// The image `canonical_ref` names (ImageRef::Canonical), pulled and unpacked unless cached.
  /// Blocks for the pull; a second caller of the same digest waits for the first. A path on the
  /// node (oci-archive:, docker-archive:, oci:) is copied by skopeo running as `user` (the job's
  /// credentials: root never reads a user's path) into a staging directory that agentd then takes
  /// over (owned by root, no symlink or special file accepted) before unpacking; without `user`
  /// such an image is refused. Errors say what failed and why, with skopeo's reason ("image
  /// docker://...: manifest unknown"). `transient` is set when a retry may succeed (the registry
  /// could not be reached, a timeout). `auth_file` (docker:// only): the job's registry credentials,
  /// opened as `user` (at most kMaxAuthFileBytes), copied to a root-only file for skopeo's
  /// --authfile and removed after the pull; without it pulls are anonymous (--no-creds).
  /// Who may use a cached image (Kubernetes' AlwaysPullImages problem): an image pulled anonymously
  /// is public, anyone's; one pulled with credentials, or copied from a path on the node, is private
  /// to its source: a docker:// job naming its digest is asked the registry again with its own
  /// credentials (a manifest fetch), and a job whose reference leads to the same digest from another
  /// registry or repository must have it copied from there in full first (ProveByCopy: a registry
  /// need only hold the manifest to claim a digest), then uses the cached copy.
  /// The source is kept beside the image (kImageSourceFile); an image without one is removed at Init.
  Parsed<std::shared_ptr<const CachedImage>> Acquire(const std::string& canonical_ref, const ProgressFn& progress,
                                                     PullReport* report, bool* transient,
                                                     const ToolUser* user = nullptr, const std::string& auth_file = "");

  /// Ends the pulls in progress (their helpers are killed; they fail as timed out) and every later
  /// one at once: agentd's shutdown.
  void Cancel() { cancelled_ = true; }

  /// The cached image of `digest` (pinned while the result lives), nullptr when not cached. For a
  /// task adopted after a reload in place: its access was checked when it was pulled.
  std::shared_ptr<const CachedImage> Find(const std::string& digest);

  /// Unpacked bytes in the cache now, and the number of images.
  int64_t UsedBytes() const;
  size_t Images() const;

 private:
  struct Entry {
    std::shared_ptr<const CachedImage> image;
    std::chrono::steady_clock::time_point last_used;
    std::string source;         // "docker://REGISTRY/REPOSITORY", or "node-path"
    bool public_image = false;  // pulled without credentials: any job may use it
  };
  /// May a job naming `ref` (source `source`, its registry asked already when `resolved`) use the
  /// cached digest `digest`? "" when it may (or nothing is cached), else why not; `*proven` is set
  /// when its source served the whole image (ProveByCopy).
  std::string CheckCachedAccess(const ImageRef& ref, const std::string& source, const std::string& digest,
                                const std::string& auth, bool resolved, bool* transient, bool* proven);
  /// Copies `digest` from `source` with the job's credentials into a scratch layout (every blob
  /// checked by skopeo) and drops it: "" when the source serves all of it, else why not.
  std::string ProveByCopy(const ImageRef& ref, const std::string& source, const std::string& digest,
                          const std::string& auth, bool* transient);
  std::string Resolve(const ImageRef& ref, const std::string& auth, std::string* digest, int64_t* layer_bytes,
                      bool* transient);
  /// The job's credentials file copied for skopeo: "" and the path in *copy, or the error.
  std::string CopyAuthFile(const std::string& auth_file, const ToolUser& user, std::string* copy);
  Parsed<std::shared_ptr<const CachedImage>> Pull(const ImageRef& ref, const std::string& digest, int64_t layer_bytes,
                                                  const ProgressFn& progress, PullReport* report, bool* transient,
                                                  const std::string& staged, const std::string& auth);
  /// Copies a node-path image as `user` into <dir>/stage/N, takes the copy over and reads its
  /// manifest digest. Returns "" with the staging directory and digest, or the error.
  std::string Stage(const ImageRef& ref, const ToolUser& user, std::string* staged, std::string* digest);
  std::vector<std::string> ToolEnv() const;
  void EvictFor(int64_t bytes);  // requires mu_

  ImageCacheConfig cfg_;
  ContainerTools tools_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;  // by digest
  std::map<std::string, bool> pulling_;   // digests being pulled now
  int64_t used_ = 0;
  uint64_t seq_ = 0;
  std::atomic<bool> cancelled_{false};
};

/// Reads what a runtime spec umoci generated says of the image (process.args, env, cwd) into
/// `out`; a file over kMaxImageConfigBytes is refused. Returns "" or the error.
std::string ReadUmociImageConfig(const std::string& config_json, CachedImage* out);

/// Removes device nodes and clears setuid/setgid bits under `rootfs` (never following symlinks,
/// never leaving the file system). Counts what it changed. Returns "" or the first error.
std::string SanitizeRootfs(const std::string& rootfs, int* removed_devices, int* cleared_setid);

/// Makes everything below the directory `dir_fd` (and it) owned by root, through descriptors only
/// (openat O_NOFOLLOW, fchownat AT_SYMLINK_NOFOLLOW), then checks that it holds only directories
/// and regular files with one link each, at most kMaxStagedDepth levels deep. Returns "" or the
/// error naming the entry.
std::string TakeOverTree(int dir_fd, const std::string& name, int depth = 0);

/// Bytes of disk used by the tree at `dir` (st_blocks; hard links counted once).
int64_t TreeBytes(const std::string& dir);

}  // namespace mlsched::agent
