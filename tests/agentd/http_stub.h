// A minimal HTTP/1.0 server on 127.0.0.1 for the eviction tests: every request gets the currently
// configured status and body. Plain sockets, one thread, one request per connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace mlsched::agent::testing {

class HttpStub {
 public:
  HttpStub() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 16) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw std::runtime_error("HttpStub: cannot listen on 127.0.0.1");
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~HttpStub() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  /// Answer future requests with this status and body.
  void Set(int status, std::string body) {
    std::lock_guard lk(mu_);
    status_ = status;
    body_ = std::move(body);
  }
  std::string Url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  int Requests() const { return requests_; }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::string req;
      char buf[1024];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = read(c, buf, sizeof buf);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      std::string resp;
      {
        std::lock_guard lk(mu_);
        resp = "HTTP/1.0 " + std::to_string(status_) + " X\r\nContent-Length: " + std::to_string(body_.size()) +
               "\r\nConnection: close\r\n\r\n" + body_;
      }
      ssize_t w = write(c, resp.data(), resp.size());
      (void)w;
      close(c);
      ++requests_;
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  int status_ = 404;
  std::string body_ = "Not Found";
  std::thread thread_;
};

}  // namespace mlsched::agent::testing
