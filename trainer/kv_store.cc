#include "trainer/kv_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "trainer/log.h"

namespace mltrain {
namespace {

constexpr size_t kMaxField = 64u << 20;  // 64 MiB: far above any rendezvous value

void PutU32(std::string& out, uint32_t v) {
  unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                        static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.append(reinterpret_cast<char*>(b), 4);
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool RecvU32(int fd, uint32_t& v) {
  unsigned char b[4];
  if (!RecvAll(fd, reinterpret_cast<char*>(b), 4)) return false;
  v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  return true;
}

bool RecvField(int fd, std::string& out) {
  uint32_t len = 0;
  if (!RecvU32(fd, len) || len > kMaxField) return false;
  out.resize(len);
  return RecvAll(fd, out.data(), len);
}

void SetIoTimeout(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

KvServer::KvServer(int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("rendezvous store: socket: ") + std::strerror(errno));
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 128) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw std::runtime_error("rendezvous store: cannot listen on port " + std::to_string(port) + " (MASTER_PORT): " +
                             std::strerror(err));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

KvServer::~KvServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

void KvServer::Serve() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 100);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetIoTimeout(fd, std::chrono::milliseconds(2000));
    HandleConnection(fd);
    ::close(fd);
  }
}

void KvServer::HandleConnection(int fd) {
  char op = 0;
  std::string key, value;
  if (!RecvAll(fd, &op, 1) || !RecvField(fd, key)) return;
  std::string reply;
  if (op == 'S') {
    if (!RecvField(fd, value)) return;
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = std::move(value);
    reply = "K";
  } else if (op == 'G') {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      reply = "N";
    } else {
      reply = "F";
      PutU32(reply, static_cast<uint32_t>(it->second.size()));
      reply += it->second;
    }
  } else {
    return;
  }
  SendAll(fd, reply.data(), reply.size());
}

KvClient::KvClient(std::string host, int port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout) {}

std::string KvClient::Request(const std::string& frame) {
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string last_error = "no attempt";
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) {
      last_error = std::string("cannot resolve MASTER_ADDR: ") + gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        SetIoTimeout(fd, std::chrono::milliseconds(5000));
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 && SendAll(fd, frame.data(), frame.size())) {
          char status = 0;
          std::string value;
          bool ok = RecvAll(fd, &status, 1);
          if (ok && status == 'F') ok = RecvField(fd, value);
          ::close(fd);
          if (ok) {
            ::freeaddrinfo(res);
            return std::string(1, status) + value;
          }
          last_error = "connection dropped by the store";
        } else {
          last_error = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(res);
    }
    if (std::chrono::steady_clock::now() + backoff > deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  throw PeerLostError("rendezvous store at " + host_ + ":" + std::to_string(port_) + " (rank 0, MASTER_ADDR:MASTER_PORT) unreachable for " +
                      std::to_string(timeout_.count() / 1000.0) + " s: " + last_error);
}

void KvClient::Set(const std::string& key, const std::string& value) {
  std::string frame = "S";
  PutU32(frame, static_cast<uint32_t>(key.size()));
  frame += key;
  PutU32(frame, static_cast<uint32_t>(value.size()));
  frame += value;
  Request(frame);
}

std::optional<std::string> KvClient::TryGet(const std::string& key) {
  std::string frame = "G";
  PutU32(frame, static_cast<uint32_t>(key.size()));
  frame += key;
  std::string reply = Request(frame);
  if (reply.empty() || reply[0] != 'F') return std::nullopt;
  return reply.substr(1);
}

void KvClient::WaitAll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::string> missing = keys;
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    std::vector<std::string> still;
    for (const std::string& k : missing) {
      if (!TryGet(k)) still.push_back(k);
    }
    missing.swap(still);
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + missing[i];
  throw PeerLostError("rendezvous: " + std::to_string(missing.size()) + " key(s) not set within " +
                      std::to_string(timeout.count() / 1000.0) + " s (a rank did not arrive, or belongs to another job/attempt): " + list);
}

}  // namespace mltrain
