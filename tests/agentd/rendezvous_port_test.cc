// The rendezvous port (issue 29): rank 0's agent reserves it at prepare (a kernel-picked port, not
// derivable from the job id), reports it, and hands the bound socket to rank 0 alone as an
// inherited descriptor (MLSCHED_RENDEZVOUS_FD), closing its own copy once the task has it, or
// when the attempt is aborted. schedd relays the port in the commit (MASTER_PORT on every rank).
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>

#include <filesystem>

#include "agentd/rendezvous_port.h"
#include "session_support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;

namespace {

int BoundPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) return 0;
  return ntohs(a.sin_port);
}

/// The descriptor of this process that is a TCP socket bound to `port`, or -1.
int FindSocketBoundTo(int port) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::stoi(e.path().filename().string());
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM && BoundPort(fd) == port) return fd;
  }
  return -1;
}

/// A TCP socket with SO_REUSEADDR bound to 127.0.0.1:`port` (errno set when it is -1).
int BindReuse(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  const int err = errno;
  ::close(fd);
  errno = err;
  return -1;
}

}  // namespace

TEST_CASE("a reserved port is bound, not listening, and still free for a program that binds it with SO_REUSEADDR",
          "[rendezvous]") {
  auto r = ReserveRendezvousPort("127.0.0.1");
  INFO(r.error);
  REQUIRE(r);
  const int fd = r.value->socket->get();
  CHECK(fd >= 3);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);  // only the task it is handed to keeps it
  CHECK(r.value->port > 0);
  CHECK(BoundPort(fd) == r.value->port);
  CHECK(ReserveRendezvousPort("127.0.0.1").value->port != r.value->port);

  // Nobody can bind it plainly; PyTorch's TCPStore (SO_REUSEADDR) can bind and listen on it.
  int plain = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(r.value->port));
  CHECK(::bind(plain, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
  CHECK(errno == EADDRINUSE);
  ::close(plain);
  int store = BindReuse(r.value->port);
  REQUIRE(store >= 0);
  CHECK(::listen(store, 8) == 0);
  // Whoever listens first has it: the reserved socket cannot listen any more.
  CHECK(::listen(fd, 8) != 0);
  CHECK(errno == EADDRINUSE);
  ::close(store);

  auto bad = ReserveRendezvousPort("192.0.2.1");  // TEST-NET-1: not an address of this host
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error, Catch::StartsWith("cannot reserve a rendezvous port on '192.0.2.1': bind: "));
}

TEST_CASE("rank 0 inherits the reserved socket named by MLSCHED_RENDEZVOUS_FD, the agent's copy closes after the fork",
          "[rendezvous][session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));

  // Each rank records its MASTER_PORT, the descriptor it was named and what that descriptor is.
  const std::string cmd =
      "echo \"$MASTER_PORT ${MLSCHED_RENDEZVOUS_FD:-none}\" > rank-$RANK.txt; "
      "ls -l /proc/$$/fd | grep -o 'socket:\\[[0-9]*\\]' | sort > sockets-$RANK.txt; "
      "[ -n \"$MLSCHED_RENDEZVOUS_FD\" ] && readlink /proc/$$/fd/$MLSCHED_RENDEZVOUS_FD > link-$RANK.txt; true";
  REQUIRE(schedd.Send(Prepare(dir, 40, 1, cmd, {{0}, {1}})));
  auto pr = schedd.WaitFor(PrepareResult(40));
  REQUIRE(pr);
  REQUIRE(pr->prepare_result().ok());
  const int port = pr->prepare_result().master_port();
  REQUIRE(port > 0);
  const int held = FindSocketBoundTo(port);
  REQUIRE(held >= 0);
  const std::string inode = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(held)).string();

  // A repeated prepare reports the same port; the reservation stays one socket.
  REQUIRE(schedd.Send(Prepare(dir, 40, 1, cmd, {{0}, {1}})));
  REQUIRE(WaitUntil([&] { return schedd.Count(PrepareResult(40)) == 2; }));
  CHECK(schedd.Received().back().prepare_result().master_port() == port);

  REQUIRE(schedd.Send(Commit(40, 1, port)));
  for (int rank : {0, 1}) REQUIRE(schedd.WaitFor(Exited(40, rank)));
  CHECK(ReadFile(dir.Str("rank-0.txt")) == std::to_string(port) + " " + std::to_string(held) + "\n");
  CHECK(ReadFile(dir.Str("link-0.txt")) == inode + "\n");  // the very socket the agent bound
  CHECK(ReadFile(dir.Str("rank-1.txt")) == std::to_string(port) + " none\n");
  CHECK(ReadFile(dir.Str("sockets-1.txt")).find(inode) == std::string::npos);  // rank 1 has no copy
  CHECK(FindSocketBoundTo(port) == -1);  // the agent's copy is closed
  agent.Shutdown();
}

TEST_CASE("an aborted reservation closes its socket, a commit naming another port passes none", "[rendezvous][session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));

  REQUIRE(schedd.Send(Prepare(dir, 41, 1, "true", {{}})));
  auto pr = schedd.WaitFor(PrepareResult(41));
  REQUIRE(pr);
  const int port = pr->prepare_result().master_port();
  REQUIRE(FindSocketBoundTo(port) >= 0);
  REQUIRE(schedd.Send(Abort(41, 1)));
  CHECK(WaitUntil([&] { return FindSocketBoundTo(port) == -1; }));

  const std::string cmd = "echo \"$MASTER_PORT ${MLSCHED_RENDEZVOUS_FD:-none}\" > rank-$RANK.txt";
  REQUIRE(schedd.Send(Prepare(dir, 42, 1, cmd, {{}})));
  pr = schedd.WaitFor(PrepareResult(42));
  REQUIRE(pr);
  const int reserved = pr->prepare_result().master_port();
  const int other = reserved == 29999 ? 29998 : 29999;
  REQUIRE(schedd.Send(Commit(42, 1, other)));
  REQUIRE(schedd.WaitFor(Exited(42, 0)));
  CHECK(ReadFile(dir.Str("rank-0.txt")) == std::to_string(other) + " none\n");
  CHECK(FindSocketBoundTo(reserved) == -1);
  agent.Shutdown();
}
