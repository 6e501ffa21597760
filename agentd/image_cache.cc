#include "agentd/image_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "agentd/container_bundle.h"
#include "agentd/safe_files.h"

namespace mlsched::agent {
namespace {

using Clock = std::chrono::steady_clock;

std::string Mb(int64_t bytes) {
  std::ostringstream s;
  s.precision(bytes < 10'000'000 ? 2 : 0);
  s << std::fixed << static_cast<double>(bytes) / 1e6 << " MB";
  return s.str();
}

// Words in skopeo's errors that a later try may not meet (the registry down or slow); anything
// else (manifest unknown, unauthorized, a certificate or digest mismatch) is the image's fault.
bool TransientReason(const std::string& reason) {
  for (const char* w : {"connection refused", "no such host", "i/o timeout", "timeout", "timed out",
                        "connection reset", "502 ", "503 ", "504 ", "429 ", "too many requests", "EOF"})
    if (reason.find(w) != std::string::npos) return true;
  return false;
}

thread_local int64_t tree_bytes = 0;
thread_local std::set<std::pair<dev_t, ino_t>>* tree_links = nullptr;
int CountEntry(const char*, const struct stat* st, int, struct FTW*) {
  if (st->st_nlink > 1 && !S_ISDIR(st->st_mode) && !tree_links->insert({st->st_dev, st->st_ino}).second) return 0;
  tree_bytes += static_cast<int64_t>(st->st_blocks) * 512;
  return 0;
}

thread_local int san_devices = 0, san_setid = 0;
thread_local std::string* san_error = nullptr;
int SanitizeEntry(const char* path, const struct stat* st, int type, struct FTW*) {
  if (type == FTW_NS || type == FTW_DNR) {
    *san_error = std::string("cannot read ") + path;
    return 1;
  }
  if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) {
    if (unlink(path) != 0) {
      *san_error = std::string("cannot remove device node ") + path + ": " + std::strerror(errno);
      return 1;
    }
    ++san_devices;
  } else if (S_ISREG(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID))) {
    if (chmod(path, st->st_mode & 0777 & ~static_cast<mode_t>(S_ISUID | S_ISGID)) != 0) {
      *san_error = std::string("cannot clear setuid/setgid on ") + path + ": " + std::strerror(errno);
      return 1;
    }
    ++san_setid;
  }
  return 0;
}

std::vector<std::string> JsonStrings(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const auto& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

}  // namespace

int64_t TreeBytes(const std::string& dir) {
  std::set<std::pair<dev_t, ino_t>> links;
  tree_bytes = 0;
  tree_links = &links;
  nftw(dir.c_str(), CountEntry, 32, FTW_PHYS | FTW_MOUNT);
  tree_links = nullptr;
  return tree_bytes;
}

std::string SanitizeRootfs(const std::string& rootfs, int* removed_devices, int* cleared_setid) {
  std::string err;
  san_devices = san_setid = 0;
  san_error = &err;
  if (nftw(rootfs.c_str(), SanitizeEntry, 32, FTW_PHYS | FTW_MOUNT) != 0 && err.empty())
    err = "cannot walk " + rootfs + ": " + std::strerror(errno);
  san_error = nullptr;
  *removed_devices = san_devices;
  *cleared_setid = san_setid;
  return err;
}

std::string ReadUmociImageConfig(const std::string& config_json, CachedImage* out) {
  std::ifstream in(config_json);
  if (!in) return "cannot read " + config_json;
  std::error_code ec;
  if (auto size = std::filesystem::file_size(config_json, ec); ec || size > static_cast<uintmax_t>(kMaxImageConfigBytes))
    return "the image's config " + config_json + " is larger than " + std::to_string(kMaxImageConfigBytes) + " bytes";
  try {
    auto j = nlohmann::json::parse(in);
    const auto& p = j.at("process");
    out->entrypoint = JsonStrings(p.value("args", nlohmann::json::array()));
    out->env = JsonStrings(p.value("env", nlohmann::json::array()));
    out->workdir = p.value("cwd", std::string("/"));
    if (out->workdir.empty() || out->workdir[0] != '/') out->workdir = "/";
  } catch (const std::exception& e) {
    return "bad image runtime config " + config_json + ": " + e.what();
  }
  return "";
}

ImageCache::ImageCache(ImageCacheConfig config, ContainerTools tools) : cfg_(std::move(config)), tools_(std::move(tools)) {}

namespace {

// Beside each cached image: "public SOURCE" or "private SOURCE" (one line), who may use it.
constexpr const char* kImageSourceFile = "mlsched-source";

std::string SourceOf(const ImageRef& ref) {
  return ref.transport == ImageTransport::kDocker ? "docker://" + ref.registry + "/" + ref.repository : "node-path";
}

bool ReadImageSource(const std::string& dir, std::string* source, bool* public_image) {
  std::ifstream in(dir + "/" + kImageSourceFile);
  std::string kind;
  if (!(in >> std::setw(16) >> kind >> std::setw(kMaxImageRefBytes + 16) >> *source)) return false;
  *public_image = kind == "public";
  return (kind == "public" || kind == "private") && !source->empty();
}

}  // namespace

std::vector<std::string> ImageCache::ToolEnv() const {
  // Nothing of agentd's environment: no HOME (no root credentials found by accident), the
  // temporary files of a pull inside the cache (skopeo's default is /var/tmp).
  return {"PATH=" + std::string(kContainerToolPath), "TMPDIR=" + cfg_.dir + "/tmp", "HOME=/nonexistent", "LC_ALL=C"};
}

std::string ImageCache::Init() {
  // The cache and stage/ are searchable (a job's skopeo writes its staging directory there), not
  // listable; images/ and tmp/ are agentd's alone.
  for (const auto& [d, mode] : {std::pair<std::string, mode_t>{cfg_.dir, 0711}, {cfg_.dir + "/images", 0700},
                                {cfg_.dir + "/tmp", 0700}, {cfg_.dir + "/stage", 0711}}) {
    if (mkdir(d.c_str(), mode) != 0 && errno != EEXIST) return "cannot create " + d + ": " + std::strerror(errno);
    struct stat st{};
    if (lstat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
      return d + " is not a directory of agentd's user";
    if (chmod(d.c_str(), mode) != 0) return "cannot chmod " + d + ": " + std::strerror(errno);
  }
  for (const auto& [sub, mode] : {std::pair<std::string, mode_t>{"/tmp", 0700}, {"/stage", 0711}}) {
    if (auto err = RemoveTree(cfg_.dir + sub); !err.empty()) return err;
    if (mkdir((cfg_.dir + sub).c_str(), mode) != 0 || chmod((cfg_.dir + sub).c_str(), mode) != 0)
      return "cannot create " + cfg_.dir + sub + ": " + std::strerror(errno);
  }
  std::lock_guard lk(mu_);
  std::error_code ec;
  for (const auto& de : std::filesystem::directory_iterator(cfg_.dir + "/images", ec)) {
    const std::string name = de.path().filename().string();
    auto image = std::make_shared<CachedImage>();
    image->digest = "sha256:" + name;
    image->dir = cfg_.dir + "/images/" + name;
    image->rootfs = image->dir + "/rootfs";
    Entry entry;
    if (name.size() != 64 || name.find_first_not_of("0123456789abcdef") != std::string::npos ||
        !ReadUmociImageConfig(image->dir + "/config.json", image.get()).empty() ||
        !ReadImageSource(image->dir, &entry.source, &entry.public_image)) {
      spdlog::warn("image cache: removing {} (not a complete image, or no record of its source)", image->dir);
      RemoveTree(image->dir);
      continue;
    }
    image->bytes = TreeBytes(image->dir);
    used_ += image->bytes;
    entry.image = image;
    entry.last_used = Clock::now();
    entries_[image->digest] = std::move(entry);
  }
  spdlog::info("image cache {}: {} image(s), {} of {}", cfg_.dir, entries_.size(), Mb(used_),
               cfg_.max_bytes > 0 ? Mb(cfg_.max_bytes) : std::string("no limit"));
  return "";
}

int64_t ImageCache::UsedBytes() const {
  std::lock_guard lk(mu_);
  return used_;
}

std::shared_ptr<const CachedImage> ImageCache::Find(const std::string& digest) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(digest);
  if (it == entries_.end()) return nullptr;
  it->second.last_used = std::chrono::steady_clock::now();
  return it->second.image;
}

size_t ImageCache::Images() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

std::string ImageCache::Resolve(const ImageRef& ref, const std::string& auth, std::string* digest,
                                int64_t* layer_bytes, bool* transient) {
  auto inspect = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {tools_.skopeo, "inspect", "--retry-times", "2"};
    if (auth.empty()) argv.push_back("--no-creds");
    else argv.insert(argv.end(), {"--authfile", auth});
    if (!cfg_.cert_dir.empty()) argv.insert(argv.end(), {"--cert-dir", cfg_.cert_dir});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunTool(argv, ToolEnv(), std::chrono::seconds(120), 4 << 20, nullptr, &cancelled_);
  };
  ToolResult r = inspect({"--format", "{{.Digest}}", ref.Canonical()});
  if (!r.Ok()) {
    *transient = r.timed_out || TransientReason(r.Reason());
    return r.Reason();
  }
  std::istringstream in(r.output);
  in >> *digest;
  if (digest->size() != 71 || digest->rfind("sha256:", 0) != 0 ||
      digest->find_first_not_of("0123456789abcdef", 7) != std::string::npos)
    return "the registry named no sha256 digest (" + r.output.substr(0, 200) + ")";
  if (ref.digest.size() && ref.digest != *digest) return "the registry answered digest " + *digest + " for " + ref.digest;
  // The layers' sizes from the manifest itself (an index lists manifests, not layers: unknown).
  *layer_bytes = 0;
  r = inspect({"--raw", "docker://" + ref.registry + "/" + ref.repository + "@" + *digest});
  if (r.Ok()) {
    try {
      auto manifest = nlohmann::json::parse(r.output);
      if (manifest.contains("layers") && manifest["layers"].is_array())
        for (const auto& l : manifest["layers"]) *layer_bytes += l.value("size", int64_t{0});
    } catch (const std::exception&) {
    }
  }
  return "";
}

std::string ImageCache::CheckCachedAccess(const ImageRef& ref, const std::string& source, const std::string& digest,
                                          const std::string& auth, bool resolved, bool* transient, bool* proven) {
  if (ref.transport != ImageTransport::kDocker) return "";  // the job's user copied it: it has the content
  bool other_source = false;
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(digest);
    if (it == entries_.end() || it->second.public_image) return "";
    other_source = it->second.source != source;
    if (!other_source && resolved) return "";  // the registry was asked with this job's credentials just now
  }
  if (other_source) {
    std::string err = ProveByCopy(ref, source, digest, auth, transient);
    *proven = err.empty();
    return err;
  }
  // A private image named by its digest: the job's own credentials must fetch its manifest.
  std::vector<std::string> argv = {tools_.skopeo, "inspect", "--raw", "--retry-times", "2"};
  if (auth.empty()) argv.push_back("--no-creds");
  else argv.insert(argv.end(), {"--authfile", auth});
  if (!cfg_.cert_dir.empty()) argv.insert(argv.end(), {"--cert-dir", cfg_.cert_dir});
  argv.push_back(source + "@" + digest);
  const ToolResult r = RunTool(argv, ToolEnv(), std::chrono::seconds(120), 4 << 20, nullptr, &cancelled_);
  if (r.Ok()) return "";
  *transient = r.timed_out || TransientReason(r.Reason());
  return "the registry refuses this job the cached " + digest.substr(0, 19) + ": " + r.Reason();
}

std::string ImageCache::ProveByCopy(const ImageRef& ref, const std::string& source, const std::string& digest,
                                    const std::string& auth, bool* transient) {
  // Another registry claiming a private image's digest need only serve its manifest: the job's
  // source must serve every blob too. skopeo checks each against the manifest's digests.
  std::string tmp;
  {
    std::lock_guard lk(mu_);
    tmp = cfg_.dir + "/tmp/proof-" + digest.substr(7, 16) + "." + std::to_string(++seq_);
  }
  if (mkdir(tmp.c_str(), 0700) != 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  std::vector<std::string> copy = {tools_.skopeo, "copy", "--quiet", "--retry-times", "2"};
  if (auth.empty()) copy.push_back("--src-no-creds");
  else copy.insert(copy.end(), {"--src-authfile", auth});
  if (!cfg_.cert_dir.empty()) copy.insert(copy.end(), {"--src-cert-dir", cfg_.cert_dir});
  copy.insert(copy.end(), {source + "@" + digest, "oci:" + tmp + "/layout:image"});
  const ToolResult r = RunTool(copy, ToolEnv(), cfg_.pull_timeout, 64 * 1024, nullptr, &cancelled_);
  RemoveTree(tmp);
  if (r.Ok()) return "";
  *transient = r.timed_out || TransientReason(r.Reason());
  return digest.substr(0, 19) + " is on this node from another source, pulled with credentials, and " + ref.Canonical() +
         " did not serve all of it: " + r.Reason();
}

void ImageCache::EvictFor(int64_t bytes) {
  while (cfg_.max_bytes > 0 && used_ + bytes > cfg_.max_bytes) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.image.use_count() == 1 && (victim == entries_.end() || it->second.last_used < victim->second.last_used))
        victim = it;
    if (victim == entries_.end()) return;  // every image is in use: the cache runs over its size for now
    spdlog::info("image cache: evicting {} ({}, least recently used)", victim->first, Mb(victim->second.image->bytes));
    used_ -= victim->second.image->bytes;
    const std::string doomed = cfg_.dir + "/tmp/evicted-" + std::to_string(++seq_);
    if (rename(victim->second.image->dir.c_str(), doomed.c_str()) == 0) RemoveTree(doomed);
    else RemoveTree(victim->second.image->dir);
    entries_.erase(victim);
  }
}

Parsed<std::shared_ptr<const CachedImage>> ImageCache::Acquire(const std::string& canonical_ref,
                                                               const ProgressFn& progress, PullReport* report,
                                                               bool* transient, const ToolUser* user,
                                                               const std::string& auth_file) {
  Parsed<std::shared_ptr<const CachedImage>> out;
  *transient = false;
  const auto t0 = Clock::now();
  ImageRef ref;
  if (auto err = ParseImageRef(canonical_ref, &ref); !err.empty()) {
    out.error = "image " + canonical_ref.substr(0, kMaxImageRefBytes) + ": " + err;
    return out;
  }
  std::string digest = ref.digest, staged, auth;
  int64_t layer_bytes = 0;
  bool cached = false;
  struct StageCleanup {
    std::string dir, auth;
    ~StageCleanup() {
      if (!dir.empty()) RemoveTree(dir);
      if (!auth.empty()) unlink(auth.c_str());
    }
  } stage_cleanup;
  if (!auth_file.empty()) {
    if (!user || ref.transport != ImageTransport::kDocker) {
      out.error = "image " + canonical_ref + ": registry credentials are for docker:// images, read as the job's user";
      return out;
    }
    if (auto err = CopyAuthFile(auth_file, *user, &auth); !err.empty()) {
      out.error = "image " + canonical_ref + ": " + err;
      return out;
    }
    stage_cleanup.auth = auth;
  }
  if (ref.transport != ImageTransport::kDocker) {
    if (!user) {
      out.error = "image " + canonical_ref + ": a path on the node is read as the job's user, and none was given";
      return out;
    }
    progress("image: copying " + canonical_ref + " as uid " + std::to_string(user->uid));
    if (auto err = Stage(ref, *user, &staged, &digest); !err.empty()) {
      out.error = "image " + canonical_ref + ": " + err;
      return out;
    }
    stage_cleanup.dir = staged;
    cached = true;  // nothing to resolve: the staged copy names its digest
  }
  if (!digest.empty() && !cached) {
    std::lock_guard lk(mu_);
    cached = entries_.count(digest) > 0;
  }
  const std::string source = SourceOf(ref);
  const bool resolved = !cached;
  if (!cached) {
    if (auto err = Resolve(ref, auth, &digest, &layer_bytes, transient); !err.empty()) {
      out.error = "image " + canonical_ref + ": " + err;
      return out;
    }
  }
  bool proven = false;
  if (auto err = CheckCachedAccess(ref, source, digest, auth, resolved, transient, &proven); !err.empty()) {
    out.error = "image " + canonical_ref + ": " + err;
    return out;
  }
  std::unique_lock lk(mu_);
  for (;;) {
    if (auto it = entries_.find(digest); it != entries_.end()) {
      // Pulled by another task while this one resolved: the same rule (its registry asked already).
      if (ref.transport == ImageTransport::kDocker && !it->second.public_image && it->second.source != source &&
          !proven) {
        lk.unlock();
        if (auto err = ProveByCopy(ref, source, digest, auth, transient); !err.empty()) {
          out.error = "image " + canonical_ref + ": " + err;
          return out;
        }
        proven = true;
        lk.lock();
        continue;  // look again: it may have been evicted meanwhile
      }
      it->second.last_used = Clock::now();
      report->cached = true;
      report->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      out.value = it->second.image;
      return out;
    }
    if (!pulling_.count(digest)) break;
    cv_.wait(lk);
    if (!entries_.count(digest) && !pulling_.count(digest)) {  // the pull we waited for failed: not again now
      out.error = "image " + canonical_ref + ": the pull of " + digest + " by another task on this node failed";
      *transient = true;
      return out;
    }
  }
  pulling_[digest] = true;
  lk.unlock();
  out = Pull(ref, digest, layer_bytes, progress, report, transient, staged, auth);
  lk.lock();
  pulling_.erase(digest);
  if (out) {
    EvictFor((*out.value)->bytes);
    used_ += (*out.value)->bytes;
    Entry entry{*out.value, Clock::now(), source, ref.transport == ImageTransport::kDocker && auth.empty()};
    // Who may use it, kept for the next agentd (an image without this record is removed at Init).
    std::ofstream(entry.image->dir + "/" + kImageSourceFile) << (entry.public_image ? "public " : "private ") << source << "\n";
    entries_[digest] = std::move(entry);
  }
  cv_.notify_all();
  report->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

Parsed<std::shared_ptr<const CachedImage>> ImageCache::Pull(const ImageRef& ref, const std::string& digest,
                                                            int64_t layer_bytes, const ProgressFn& progress,
                                                            PullReport* report, bool* transient,
                                                            const std::string& staged, const std::string& auth) {
  Parsed<std::shared_ptr<const CachedImage>> out;
  const std::string hex = digest.substr(7);
  const std::string name = "docker://" + ref.registry + "/" + ref.repository + "@" + digest;
  auto fail = [&](std::string why) {
    out.error = "image " + ref.Canonical() + ": " + why;
    return out;
  };
  if (cfg_.max_bytes > 0 && layer_bytes > cfg_.max_bytes)
    return fail("its layers are " + Mb(layer_bytes) + " compressed, more than the node's image cache holds (" +
                Mb(cfg_.max_bytes) + ", agentd --image-cache-size)");
  std::string tmp;
  {
    std::lock_guard lk(mu_);
    tmp = cfg_.dir + "/tmp/" + hex.substr(0, 16) + "." + std::to_string(++seq_);
  }
  if (mkdir(tmp.c_str(), 0700) != 0) return fail("cannot create " + tmp + ": " + std::strerror(errno));
  struct Cleanup {
    std::string dir;
    ~Cleanup() { RemoveTree(dir); }
  } cleanup{tmp};
  ToolResult r;
  if (staged.empty()) {
    progress("image: pulling " + ref.Canonical() + " (" + digest.substr(0, 19) + ", " + Mb(layer_bytes) + " of layers)");
    std::vector<std::string> copy = {tools_.skopeo, "copy", "--quiet", "--retry-times", "2"};
    if (auth.empty()) copy.push_back("--src-no-creds");
    else copy.insert(copy.end(), {"--src-authfile", auth});
    if (!cfg_.cert_dir.empty()) copy.insert(copy.end(), {"--src-cert-dir", cfg_.cert_dir});
    copy.insert(copy.end(), {name, "oci:" + tmp + "/layout:image"});
    r = RunTool(copy, ToolEnv(), cfg_.pull_timeout, 64 * 1024, nullptr, &cancelled_);
    if (!r.Ok()) {
      *transient = r.timed_out || TransientReason(r.Reason());
      return fail("pull failed: " + r.Reason());
    }
  } else if (rename((staged + "/layout").c_str(), (tmp + "/layout").c_str()) != 0) {
    return fail("cannot move the staged copy: " + std::string(std::strerror(errno)));
  }
  report->fetched_bytes = TreeBytes(tmp + "/layout");
  if (cfg_.max_bytes > 0 && report->fetched_bytes > cfg_.max_bytes)
    return fail("its layers are " + Mb(report->fetched_bytes) + ", more than the node's image cache holds (" +
                Mb(cfg_.max_bytes) + ", agentd --image-cache-size)");
  r = RunTool({tools_.umoci, "unpack", "--image", tmp + "/layout:image", tmp + "/bundle"}, ToolEnv(), cfg_.pull_timeout,
              64 * 1024, nullptr, &cancelled_);
  if (!r.Ok()) return fail("unpack failed: " + r.Reason());
  RemoveTree(tmp + "/layout");
  auto image = std::make_shared<CachedImage>();
  image->digest = digest;
  if (auto err = ReadUmociImageConfig(tmp + "/bundle/config.json", image.get()); !err.empty()) return fail(err);
  if (auto err = SanitizeRootfs(tmp + "/bundle/rootfs", &report->removed_devices, &report->cleared_setid); !err.empty())
    return fail(err);
  image->bytes = TreeBytes(tmp + "/bundle");
  if (cfg_.max_bytes > 0 && image->bytes > cfg_.max_bytes)
    return fail("it unpacks to " + Mb(image->bytes) + ", more than the node's image cache holds (" + Mb(cfg_.max_bytes) +
                ", agentd --image-cache-size)");
  image->dir = cfg_.dir + "/images/" + hex;
  image->rootfs = image->dir + "/rootfs";
  if (rename((tmp + "/bundle").c_str(), image->dir.c_str()) != 0)
    return fail("cannot move the image into " + image->dir + ": " + std::strerror(errno));
  std::string changed;
  if (report->removed_devices) changed += ", " + std::to_string(report->removed_devices) + " device node(s) removed";
  if (report->cleared_setid) changed += ", setuid/setgid cleared on " + std::to_string(report->cleared_setid) + " file(s)";
  progress("image: pulled " + digest.substr(0, 19) + " (" + Mb(report->fetched_bytes) + " fetched, " + Mb(image->bytes) +
           " unpacked" + changed + ")");
  out.value = std::move(image);
  return out;
}

std::string TakeOverTree(int dir_fd, const std::string& name, int depth) {
  if (depth > kMaxStagedDepth) return name + " is nested more than " + std::to_string(kMaxStagedDepth) + " levels deep";
  if (fchown(dir_fd, 0, 0) != 0 || fchmod(dir_fd, 0700) != 0) return "cannot take over " + name + ": " + std::strerror(errno);
  DIR* d = fdopendir(dup(dir_fd));
  if (!d) return "cannot read " + name + ": " + std::strerror(errno);
  std::vector<std::string> entries;
  while (dirent* e = readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) entries.push_back(e->d_name);
  closedir(d);
  for (const auto& entry : entries) {
    const std::string path = name + "/" + entry;
    struct stat st{};
    if (fstatat(dir_fd, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return "cannot stat " + path;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dir_fd, entry.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) return "cannot open " + path + ": " + std::strerror(errno);
      std::string err = TakeOverTree(sub, path, depth + 1);
      close(sub);
      if (!err.empty()) return err;
      continue;
    }
    if (!S_ISREG(st.st_mode)) return path + " is not a regular file or directory";
    if (fchownat(dir_fd, entry.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0) return "cannot take over " + path;
    // Checked again once root owns it: nothing can be swapped in since.
    if (fstatat(dir_fd, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != 0)
      return path + " changed while it was taken over, or is a hard link";
  }
  return "";
}

std::string ImageCache::CopyAuthFile(const std::string& auth_file, const ToolUser& user, std::string* copy) {
  auto fds = OpenAsUser({auth_file}, user.uid, user.gid, user.groups);
  if (!fds) return "registry credentials " + fds.error;
  if ((*fds.value)->directory[0]) return "registry credentials " + auth_file + " is a directory";
  std::string text;
  char buf[8192];
  for (ssize_t n; (n = read((*fds.value)->fds[0], buf, sizeof buf)) > 0;) {
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxAuthFileBytes)
      return "registry credentials " + auth_file + " is larger than " + std::to_string(kMaxAuthFileBytes) + " bytes";
  }
  {
    std::lock_guard lk(mu_);
    *copy = cfg_.dir + "/tmp/auth-" + std::to_string(++seq_) + ".json";
  }
  int fd = open(copy->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot create " + *copy + ": " + std::strerror(errno);
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) {
    unlink(copy->c_str());
    return "cannot write " + *copy;
  }
  return "";
}

std::string ImageCache::Stage(const ImageRef& ref, const ToolUser& user, std::string* staged, std::string* digest) {
  {
    std::lock_guard lk(mu_);
    *staged = cfg_.dir + "/stage/" + std::to_string(++seq_);
  }
  if (mkdir(staged->c_str(), 0700) != 0 || chown(staged->c_str(), user.uid, user.gid) != 0)
    return "cannot create " + *staged + ": " + std::strerror(errno);
  std::vector<std::string> env = {"PATH=" + std::string(kContainerToolPath), "TMPDIR=" + *staged, "HOME=/nonexistent",
                                  "LC_ALL=C"};
  ToolResult r = RunTool({tools_.skopeo, "copy", "--quiet", ref.Canonical(), "oci:" + *staged + "/layout:image"}, env,
                         cfg_.pull_timeout, 64 * 1024, &user, &cancelled_);
  if (!r.Ok()) return "copy as uid " + std::to_string(user.uid) + " failed: " + r.Reason();
  int fd = open(staged->c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "cannot open " + *staged + ": " + std::strerror(errno);
  std::string err = TakeOverTree(fd, *staged);
  close(fd);
  if (!err.empty()) return err;
  std::ifstream in(*staged + "/layout/index.json");
  try {
    auto index = nlohmann::json::parse(in);
    for (const auto& m : index.at("manifests"))
      if (m.value("annotations", nlohmann::json::object()).value("org.opencontainers.image.ref.name", "") == "image")
        *digest = m.value("digest", "");
  } catch (const std::exception& e) {
    return std::string("the copy's index.json: ") + e.what();
  }
  if (digest->size() != 71 || digest->rfind("sha256:", 0) != 0 ||
      digest->find_first_not_of("0123456789abcdef", 7) != std::string::npos)
    return "the copy names no sha256 manifest digest";
  return "";
}

}  // namespace mlsched::agent
