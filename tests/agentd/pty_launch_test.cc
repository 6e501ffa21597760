// A session's process (launcher.h LaunchRequest::stdio, controlling_tty): it gets the pty as 0, 1
// and 2, takes it as its controlling terminal itself, as the user, after setsid; the launching
// process (root in agentd) never has it as its own terminal.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "agentd/launcher.h"

using namespace mlsched::agent;

namespace {

// Field 7 of /proc/PID/stat: the controlling terminal's device number (0: none).
long TtyNr(const std::string& stat_line) {
  std::istringstream in(stat_line.substr(stat_line.rfind(')') + 2));
  std::string f;
  for (int i = 3; i <= 7 && in >> f; ++i) {
  }
  return std::stol(f);
}

std::string ReadAll(int fd, pid_t pid) {
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

}  // namespace

TEST_CASE("a session's process takes its pty as its controlling terminal, as the user") {
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(master >= 0);
  REQUIRE(unlockpt(master) == 0);
  const int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  REQUIRE(slave >= 0);
  struct stat st{};
  REQUIRE(fstat(slave, &st) == 0);
  LaunchRequest r;
  r.executable = "/bin/sh";
  r.argv = {"sh", "-c", "cat /proc/self/stat; id -u; test -t 0 && echo is-a-tty"};
  r.env = {"PATH=/usr/bin:/bin"};
  r.workdir = "/";
  r.stdio = {slave, slave, slave};
  r.controlling_tty = true;
  if (geteuid() == 0) {
    fchown(slave, 65534, static_cast<gid_t>(-1));
    r.switch_user = true;
    r.uid = 65534;
    r.gid = 65534;
  }
  SpawnResult s = SpawnTask(r);
  REQUIRE(s.pid > 0);
  close(slave);
  const std::string out = ReadAll(master, s.pid);
  close(master);
  INFO(out);
  const long want = static_cast<long>((major(st.st_rdev) << 8) | (minor(st.st_rdev) & 0xff) | ((minor(st.st_rdev) & ~0xffu) << 12));
  CHECK(TtyNr(out.substr(0, out.find('\n'))) == want);
  CHECK(out.find(geteuid() == 0 ? "65534" : std::to_string(geteuid())) != std::string::npos);
  CHECK(out.find("is-a-tty") != std::string::npos);
  // The launcher itself has no controlling terminal from it.
  std::ifstream self("/proc/self/stat");
  std::string line;
  std::getline(self, line);
  CHECK(TtyNr(line) != want);
}
