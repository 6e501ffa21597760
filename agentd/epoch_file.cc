#include "agentd/epoch_file.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agentd/safe_files.h"

namespace mlsched::agent {

EpochFile::EpochFile(std::string dir) : dir_(std::move(dir)) {}

int64_t EpochFile::Load() const {
  if (dir_.empty()) return 0;
  struct stat st {};
  const std::string path = dir_ + "/" + kEpochFileName;
  if (::fstatat(AT_FDCWD, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) return 0;
  std::string bytes;
  if (std::string err = ReadRegularFileAt(dir_, kEpochFileName, kMaxEpochFileBytes, &bytes); !err.empty()) {
    spdlog::warn("epoch: {}; starting from epoch 0", err);
    return 0;
  }
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == ' ')) bytes.pop_back();
  int64_t epoch = 0;
  bool ok = !bytes.empty() && bytes.size() <= 18;  // fits int64_t
  for (char c : bytes) {
    if (c < '0' || c > '9') ok = false;
    else epoch = epoch * 10 + (c - '0');
  }
  if (!ok) {
    spdlog::warn("epoch: {}/{} does not hold a number; starting from epoch 0", dir_, kEpochFileName);
    return 0;
  }
  return epoch;
}

std::string EpochFile::Store(int64_t epoch) const {
  if (dir_.empty()) return "";
  const std::string tmp = std::string(kEpochFileName) + ".tmp", bytes = std::to_string(epoch) + "\n";
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return "cannot open " + dir_ + ": " + std::strerror(errno);
  bool ok = false;
  ::unlinkat(dfd, tmp.c_str(), 0);
  if (const int f = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600); f >= 0) {
    ok = ::write(f, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::fsync(f) == 0;
    ::close(f);
    ok = ok && ::renameat(dfd, tmp.c_str(), dfd, kEpochFileName) == 0 && ::fsync(dfd) == 0;
  }
  std::string err = ok ? "" : "cannot write " + dir_ + "/" + kEpochFileName + ": " + std::strerror(errno);
  if (!ok) ::unlinkat(dfd, tmp.c_str(), 0);
  ::close(dfd);
  return err;
}

}  // namespace mlsched::agent
