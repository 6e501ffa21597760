#include "agentd/safe_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace mlsched::agent {

namespace {

std::string Errno(const std::string& what, const std::string& path) { return what + " " + path + ": " + std::strerror(errno); }

/// Closes a descriptor on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Removes every entry of the directory open as `dirfd` (which it closes), depth first.
std::string RemoveContents(int dirfd, const std::string& path, int depth) {
  if (depth > 64) {
    ::close(dirfd);
    return "directory tree under " + path + " is deeper than 64 levels";
  }
  DIR* d = ::fdopendir(dirfd);
  if (!d) {
    ::close(dirfd);
    return Errno("cannot read", path);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  std::string first_error;
  for (const auto& name : names) {
    if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      if (first_error.empty()) first_error = Errno("cannot remove", path + "/" + name);
      continue;
    }
    // A directory: descend through its fd; a symlink swapped in meanwhile makes openat fail and is
    // unlinked on the next line instead.
    int sub = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0) {
      std::string err = RemoveContents(sub, path + "/" + name, depth + 1);
      if (!err.empty() && first_error.empty()) first_error = err;
    }
    if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && ::unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT &&
        first_error.empty())
      first_error = Errno("cannot remove", path + "/" + name);
  }
  ::closedir(d);  // closes dirfd
  return first_error;
}

}  // namespace

std::string CreateAttemptDir(const std::string& dir, const std::string& script, bool chown_to_user, uid_t uid, gid_t gid) {
  if (script.size() > kMaxScriptBytes)
    return "batch script of " + std::to_string(script.size()) + " bytes exceeds " + std::to_string(kMaxScriptBytes);
  if (::mkdir(dir.c_str(), 0700) != 0) return Errno("cannot create", dir);
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (d.fd < 0) return Errno("cannot open", dir);
  if (::fchmod(d.fd, 0700) != 0) return Errno("cannot chmod", dir);  // whatever the umask
  if (!script.empty()) {
    Fd f(::openat(d.fd, "script", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0700));
    if (f.fd < 0) return Errno("cannot create", dir + "/script");
    if (!WriteAll(f.fd, script)) return Errno("cannot write", dir + "/script");
    if (::fchmod(f.fd, 0700) != 0) return Errno("cannot chmod", dir + "/script");
    if (chown_to_user && ::fchown(f.fd, uid, gid) != 0) return Errno("cannot give to uid " + std::to_string(uid), dir + "/script");
  }
  // Last: until now only root could enter the directory, so nothing in it was the user's.
  if (chown_to_user && ::fchown(d.fd, uid, gid) != 0) return Errno("cannot give to uid " + std::to_string(uid), dir);
  return "";
}

std::string ReadRegularFileAt(const std::string& dir, const std::string& name, size_t max_bytes, std::string* out,
                              struct stat* st_out) {
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (d.fd < 0) return Errno("cannot open", dir);
  Fd f(::openat(d.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (f.fd < 0) return Errno("cannot open", dir + "/" + name);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return Errno("cannot stat", dir + "/" + name);
  if (!S_ISREG(st.st_mode)) return dir + "/" + name + " is not a regular file";
  if (static_cast<size_t>(st.st_size) > max_bytes)
    return dir + "/" + name + " is larger than " + std::to_string(max_bytes) + " bytes";
  out->assign(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out->size()) {
    ssize_t n = ::read(f.fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read", dir + "/" + name);
    if (n == 0) break;  // truncated meanwhile
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  if (st_out) *st_out = st;
  return "";
}

std::string RemoveTree(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return "";
    if (errno == ENOTDIR || errno == ELOOP) return ::unlink(dir.c_str()) == 0 ? "" : Errno("cannot remove", dir);
    return Errno("cannot open", dir);
  }
  std::string err = RemoveContents(fd, dir, 0);
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT && err.empty()) err = Errno("cannot remove", dir);
  return err;
}

}  // namespace mlsched::agent
