#include "agentd/container_bundle.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "agentd/container_tools.h"
#include "agentd/safe_files.h"

namespace mlsched::agent {
namespace {

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

int OpenInRoot(int root_fd, const std::string& rel, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  int fd;
  do {
    fd = static_cast<int>(syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
  } while (fd < 0 && errno == EAGAIN);
  return fd;
}

}  // namespace

// Makes `name` in the directory `dir` a symlink to `target`; a file or symlink there is replaced
// (in the task's own overlay layer), a directory is an error. `path` names it in errors.
static std::string MakeSymlinkAt(int dir, const std::string& name, const std::string& target, const std::string& path) {
  if (symlinkat(target.c_str(), dir, name.c_str()) == 0) return "";
  if (errno != EEXIST) return Errno("create symlink " + path);
  if (unlinkat(dir, name.c_str(), 0) != 0) return Errno("replace " + path + " with a symlink");
  if (symlinkat(target.c_str(), dir, name.c_str()) != 0) return Errno("create symlink " + path);
  return "";
}

std::string MakeInRoot(int root_fd, const MountPoint& point) {
  const std::string& p = point.path;
  if (p.empty() || p[0] != '/' || p == "/") return "mount point '" + p + "' is not an absolute path below /";
  size_t pos = 1;
  int dir = OpenInRoot(root_fd, ".", O_PATH | O_DIRECTORY);
  if (dir < 0) return Errno("open the container's root");
  std::string err;
  while (err.empty()) {
    size_t end = p.find('/', pos);
    const bool last = end == std::string::npos;
    const std::string name = p.substr(pos, last ? std::string::npos : end - pos);
    const std::string prefix = p.substr(0, last ? p.size() : end);
    if (name.empty() || name == "." || name == "..") {
      err = "mount point '" + p + "' is not a clean path";
      break;
    }
    // Resolve the whole prefix inside the root (a symlink in the image is followed as the
    // container would, never out of it), or make its last component in the parent found so.
    if (last && !point.symlink_target.empty()) {
      err = MakeSymlinkAt(dir, name, point.symlink_target, p);
      break;
    }
    if (last && !point.directory) {
      // mknodat, not open(O_CREAT): no descriptor open for writing on the mount, which a fork in
      // another thread could keep alive and make the read-only remount fail with EBUSY.
      const bool made = mknodat(dir, name.c_str(), S_IFREG | 0644, 0) == 0;
      if (!made && errno != EEXIST) {
        err = Errno("create mount point " + p);
      } else if (!made) {  // already there: it must be a file
        int g = OpenInRoot(root_fd, prefix, O_PATH);
        struct stat st{};
        if (g < 0 || fstat(g, &st) != 0 || S_ISDIR(st.st_mode)) err = "mount point " + p + " is not a file in the image";
        if (g >= 0) close(g);
      }
      break;
    }
    if (mkdirat(dir, name.c_str(), 0755) != 0 && errno != EEXIST) {
      err = Errno("create mount point " + prefix);
      break;
    }
    int next = OpenInRoot(root_fd, prefix, O_PATH | O_DIRECTORY);
    if (next < 0) {
      err = Errno("mount point " + prefix + " in the image");
      break;
    }
    close(dir);
    dir = next;
    if (last) break;
    pos = end + 1;
  }
  close(dir);
  return err;
}

Parsed<std::unique_ptr<ContainerBundle>> ContainerBundle::Create(const std::string& dir, const std::string& image_rootfs,
                                                                 const std::vector<MountPoint>& mount_points,
                                                                 bool writable, uid_t uid, gid_t gid) {
  Parsed<std::unique_ptr<ContainerBundle>> out;
  if (mkdir(dir.c_str(), 0700) != 0) {
    out.error = Errno("create bundle " + dir);
    return out;
  }
  std::unique_ptr<ContainerBundle> b(new ContainerBundle(dir));
  auto fail = [&](std::string e) {
    b->TearDown();
    out.error = std::move(e);
    return std::move(out);
  };
  for (const char* sub : {"/upper", "/work", "/rootfs", "/tmp"})
    if (mkdir((dir + sub).c_str(), 0700) != 0) return fail(Errno("create " + dir + sub));
  if (chown((dir + "/tmp").c_str(), uid, gid) != 0) return fail(Errno("chown " + dir + "/tmp"));
  const std::string opts = "lowerdir=" + image_rootfs + ",upperdir=" + dir + "/upper,workdir=" + dir + "/work";
  if (mount("overlay", b->Rootfs().c_str(), "overlay", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
    return fail(Errno("mount the image's overlay on " + b->Rootfs()));
  b->mounted_ = true;
  // The root itself must be searchable by the task's user: the upper layer's root is mode 0700.
  if (chmod(b->Rootfs().c_str(), 0755) != 0) return fail(Errno("chmod " + b->Rootfs()));
  int root = open(b->Rootfs().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail(Errno("open " + b->Rootfs()));
  std::string err;
  for (const char* std_point : {"/proc", "/dev", "/sys", "/tmp"})
    if (err.empty()) err = MakeInRoot(root, {std_point, true});
  for (const auto& p : mount_points)
    if (err.empty()) err = MakeInRoot(root, p);
  close(root);
  if (!err.empty()) return fail(err);
  // Read-only now. EBUSY means a write on this mount is still in flight (seen under load, just after
  // the mount points were made): it ends within milliseconds, so try again for up to a second.
  for (int attempt = 0; !writable; ++attempt) {
    if (mount(nullptr, b->Rootfs().c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0)
      break;
    if (errno != EBUSY || attempt == 100) return fail(Errno("remount " + b->Rootfs() + " read-only"));
    usleep(10000);
  }
  out.value = std::move(b);
  return out;
}

std::string ContainerBundle::WriteConfig(const std::string& config_json) const {
  const std::string path = dir_ + "/config.json";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create " + path);
  const bool ok = write(fd, config_json.data(), config_json.size()) == static_cast<ssize_t>(config_json.size());
  close(fd);
  return ok ? "" : Errno("write " + path);
}

std::string ContainerBundle::StageUserMount(int fd, bool directory, size_t index, std::string* err) {
  const std::string mnt = dir_ + "/mnt", path = mnt + "/" + std::to_string(index);
  if (mkdir(mnt.c_str(), 0700) != 0 && errno != EEXIST) {
    *err = Errno("create " + mnt);
    return "";
  }
  if (directory ? mkdir(path.c_str(), 0700) != 0 : [&] {
        int f = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (f >= 0) close(f);
        return f < 0;
      }()) {
    *err = Errno("create " + path);
    return "";
  }
  mounted_ = true;  // from here TearDown must unmount before removing anything
  const std::string source = "/proc/self/fd/" + std::to_string(fd);
  if (mount(source.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    *err = Errno("bind the mount source onto " + path);
    return "";
  }
  return path;
}

bool UnmountBelow(const std::string& dir) {
  auto below = [&] {
    std::vector<std::string> points;
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string id, parent, devno, root, point;
      fields >> id >> parent >> devno >> root >> point;
      std::string decoded;  // mountinfo escapes space, tab, newline and backslash as \ooo
      for (size_t i = 0; i < point.size(); ++i) {
        if (point[i] == '\\' && i + 3 < point.size()) {
          decoded += static_cast<char>(std::stoi(point.substr(i + 1, 3), nullptr, 8));
          i += 3;
        } else {
          decoded += point[i];
        }
      }
      if (decoded.rfind(dir + "/", 0) == 0) points.push_back(decoded);
    }
    std::sort(points.rbegin(), points.rend());  // deeper paths sort after their parents
    return points;
  };
  for (const auto& p : below())
    if (umount2(p.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
      spdlog::warn("cannot unmount {}: {}", p, std::strerror(errno));
  return below().empty();
}

void ContainerBundle::TearDown() {
  if (removed_) return;
  if (mounted_) {
    if (!UnmountBelow(dir_)) {
      spdlog::warn("mounts remain below {}; leaving it in place", dir_);
      return;  // never remove through a mount: a staged mount is a user's directory
    }
    mounted_ = false;
  }
  if (auto err = RemoveTree(dir_); !err.empty()) spdlog::warn("cannot remove bundle {}: {}", dir_, err);
  removed_ = true;
}

ContainerBundle::~ContainerBundle() { TearDown(); }

std::unique_ptr<ContainerBundle> ContainerBundle::Adopt(const std::string& dir) {
  std::unique_ptr<ContainerBundle> b(new ContainerBundle(dir));
  b->mounted_ = true;
  return b;
}

std::string MountJobShm(const std::string& dir, uid_t uid, gid_t gid) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("create " + dir);
  struct stat st{}, parent{};
  const std::string up = dir.substr(0, dir.rfind('/'));
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || lstat(up.c_str(), &parent) != 0)
    return dir + " is not a directory";
  if (st.st_dev != parent.st_dev) return "";  // a tmpfs is already there (another rank of the job)
  const std::string opts = "mode=0700,uid=" + std::to_string(uid) + ",gid=" + std::to_string(gid);
  if (mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) return Errno("mount tmpfs on " + dir);
  return "";
}

void RemoveJobShm(const std::string& dir) {
  if (umount2(dir.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    spdlog::warn("cannot unmount {}: {}", dir, std::strerror(errno));
    return;
  }
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) spdlog::warn("cannot remove {}: {}", dir, std::strerror(errno));
}

UserFds::~UserFds() {
  for (int fd : fds) close(fd);
}

Parsed<std::shared_ptr<UserFds>> OpenAsUser(const std::vector<std::string>& paths, uid_t uid, gid_t gid,
                                            const std::vector<gid_t>& groups) {
  Parsed<std::shared_ptr<UserFds>> out;
  auto result = std::make_shared<UserFds>();
  if (paths.empty()) {
    out.value = result;
    return out;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    out.error = Errno("socketpair");
    return out;
  }
  std::vector<const char*> cpaths;
  for (const auto& p : paths) cpaths.push_back(p.c_str());
  pid_t pid = ForkHelper();
  if (pid == 0) {  // async-signal-safe only: one message per path, {errno} or {0} + the descriptor
    close(sv[0]);
    if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(1);
    for (const char* p : cpaths) {
      int fd = open(p, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
      struct stat st{};
      int res[2] = {0, 0};
      if (fd < 0) res[0] = errno;
      else if (fstat(fd, &st) != 0) res[0] = errno;
      else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) res[0] = EINVAL;
      else res[1] = S_ISDIR(st.st_mode) ? 1 : 0;
      msghdr msg{};
      iovec iov{res, sizeof res};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
      if (res[0] == 0) {
        msg.msg_control = ctrl;
        msg.msg_controllen = sizeof ctrl;
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
      }
      if (sendmsg(sv[1], &msg, 0) < 0) _exit(1);
      if (fd >= 0) close(fd);
    }
    _exit(0);
  }
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    out.error = Errno("fork");
    return out;
  }
  for (const auto& p : paths) {
    int res[2] = {0, 0};
    msghdr msg{};
    iovec iov{res, sizeof res};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    ssize_t n = recvmsg(sv[0], &msg, MSG_CMSG_CLOEXEC);
    if (n != static_cast<ssize_t>(sizeof res)) {
      out.error = "could not open " + p + " as uid " + std::to_string(uid);
      break;
    }
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (res[0] != 0 || c == nullptr || c->cmsg_type != SCM_RIGHTS) {
      out.error = p + ": " + (res[0] == EINVAL ? std::string("not a directory or regular file") : std::strerror(res[0]));
      break;
    }
    int fd;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    result->fds.push_back(fd);
    result->directory.push_back(res[1] == 1);
  }
  close(sv[0]);
  WaitHelper(pid);
  if (out.error.empty()) out.value = result;
  return out;
}

}  // namespace mlsched::agent
