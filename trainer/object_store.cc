#include "trainer/object_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "trainer/s3_store.h"

namespace mltrain {
namespace fs = std::filesystem;

LocalDirStore::LocalDirStore(std::string root) : root_(std::move(root)) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw std::runtime_error("checkpoint directory '" + root_ + "' cannot be created: " + ec.message());
}

void LocalDirStore::Put(const std::string& key, std::span<const uint8_t> data) {
  fs::path path = fs::path(root_) / key;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) throw std::runtime_error("cannot create '" + path.parent_path().string() + "': " + ec.message());
  std::string tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot flush '" + tmp + "': " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename into '" + path.string() + "': " + std::strerror(err));
  }
}

std::optional<std::vector<uint8_t>> LocalDirStore::Get(const std::string& key) {
  fs::path path = fs::path(root_) / key;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read '" + path.string() + "'");
  return data;
}

std::vector<std::string> LocalDirStore::List(const std::string& prefix) {
  std::vector<std::string> keys;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root_, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string key = fs::relative(it->path(), root_).generic_string();
    if (key.find(".tmp-") != std::string::npos) continue;  // in-flight or abandoned writes
    if (key.rfind(prefix, 0) == 0) keys.push_back(key);
  }
  if (ec) throw std::runtime_error("cannot list checkpoint directory '" + root_ + "': " + ec.message());
  return keys;
}

void LocalDirStore::Delete(const std::string& key) {
  fs::path path = fs::path(root_) / key;
  std::error_code ec;
  fs::remove(path, ec);
  // Drop the now-empty step directory; fails harmlessly while it still has files.
  if (path.parent_path() != fs::path(root_)) fs::remove(path.parent_path(), ec);
}

std::unique_ptr<ObjectStore> OpenObjectStore(const std::string& url, size_t multipart_threshold, size_t part_size) {
  if (url.rfind("file://", 0) == 0) {
    std::string path = url.substr(7);
    if (path.empty() || path[0] != '/') throw std::invalid_argument("checkpoint URL '" + url + "' must be file:///absolute/path");
    return std::make_unique<LocalDirStore>(path);
  }
  if (url.rfind("s3://", 0) == 0) return std::make_unique<S3Store>(S3Location::Parse(url), S3Credentials::FromEnv(), multipart_threshold, part_size);
  if (url.find("://") == std::string::npos && !url.empty()) return std::make_unique<LocalDirStore>(url);
  throw std::invalid_argument("unsupported checkpoint URL '" + url + "' (expected file:///dir or s3://bucket/prefix)");
}

}  // namespace mltrain
