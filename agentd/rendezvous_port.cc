#include "agentd/rendezvous_port.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mlsched::agent {

Parsed<RendezvousReservation> ReserveRendezvousPort(const std::string& address) {
  Parsed<RendezvousReservation> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int gai = ::getaddrinfo(address.c_str(), "0", &hints, &res); gai != 0) {
    out.error = "cannot reserve a rendezvous port on '" + address + "': " + gai_strerror(gai);
    return out;
  }
  int fd = -1;
  auto fail = [&](const char* step) {  // errno is still the failed call's
    out.error = "cannot reserve a rendezvous port on '" + address + "': " + step + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(res);
    return out;
  };
  const int one = 1;
  fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("socket");
  if (fd < 3) {  // never on a standard descriptor, which the task's set-up overwrites
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    ::close(fd);
    fd = moved;
    if (fd < 0) return fail("fcntl(F_DUPFD_CLOEXEC)");
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) return fail("setsockopt(SO_REUSEADDR)");
  if (res->ai_family == AF_INET6 && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)
    return fail("setsockopt(IPV6_V6ONLY)");
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) return fail("bind");
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return fail("getsockname");
  ::freeaddrinfo(res);
  RendezvousReservation r;
  r.socket = std::make_shared<const OwnedFd>(fd);
  r.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  out.value = std::move(r);
  return out;
}

}  // namespace mlsched::agent
