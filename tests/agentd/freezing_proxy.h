// A byte-forwarding proxy between two Unix sockets that can freeze: it then keeps every connection
// open but forwards nothing and reads nothing, as a SIGSTOPped schedd behaves (the kernel still
// holds the connections; nobody answers). New connections are accepted by the kernel's backlog
// only. For the agent's keepalive tests.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mlsched::agent::testing {

class FreezingProxy {
 public:
  /// Listens on `listen_path` and forwards each connection to `target_path`.
  FreezingProxy(const std::string& listen_path, const std::string& target_path) : target_(target_path) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = Addr(listen_path);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 16) != 0)
      throw std::runtime_error("FreezingProxy: cannot listen on " + listen_path);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FreezingProxy() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_) ::close(fd);
    ::close(listen_fd_);
  }
  /// From now on nothing is accepted, read or forwarded.
  void Freeze() { frozen_ = true; }

 private:
  static sockaddr_un Addr(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    return a;
  }
  struct Link {
    int client = -1, upstream = -1;
    bool client_eof = false, upstream_eof = false;
  };
  void Loop() {
    std::vector<Link> links;
    while (!stop_) {
      if (frozen_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      std::vector<pollfd> p{{listen_fd_, POLLIN, 0}};
      for (const auto& l : links) {
        p.push_back({l.client_eof ? -1 : l.client, POLLIN, 0});
        p.push_back({l.upstream_eof ? -1 : l.upstream, POLLIN, 0});
      }
      if (::poll(p.data(), p.size(), 20) <= 0) continue;
      for (size_t i = 0; i < links.size(); ++i) {
        Forward(p[1 + 2 * i], links[i].upstream, &links[i].client_eof);
        Forward(p[2 + 2 * i], links[i].client, &links[i].upstream_eof);
      }
      if (p[0].revents & POLLIN) Accept(&links);
    }
  }
  void Accept(std::vector<Link>* links) {
    const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    const int u = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a = Addr(target_);
    if (::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(c);
      ::close(u);
      return;
    }
    links->push_back(Link{c, u});
    fds_.push_back(c);
    fds_.push_back(u);
  }
  /// Copies what `from` has to `to`; at its end, half-closes `to` and stops polling `from`.
  static void Forward(const pollfd& from, int to, bool* eof) {
    if (from.fd < 0 || !(from.revents & (POLLIN | POLLHUP | POLLERR))) return;
    char buf[16384];
    const ssize_t n = ::read(from.fd, buf, sizeof(buf));
    if (n > 0) {
      (void)!::write(to, buf, static_cast<size_t>(n));
      return;
    }
    ::shutdown(to, SHUT_WR);
    *eof = true;
  }

  std::string target_;
  int listen_fd_ = -1;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false}, frozen_{false};
  std::thread thread_;
};

}  // namespace mlsched::agent::testing
