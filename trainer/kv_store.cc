#include "trainer/kv_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "trainer/log.h"

namespace mltrain {
namespace {

constexpr std::string_view kMagic = "MKV2";
constexpr size_t kMaxMessageBytes = 4096;  // 'E' and 'B' replies
constexpr size_t kReadChunk = 64u << 10;

void PutU32(std::string& out, uint32_t v) {
  unsigned char b[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                        static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
  out.append(reinterpret_cast<char*>(b), 4);
}

uint32_t GetU32(std::string_view in, size_t pos) {
  auto b = [&](size_t i) { return uint32_t{static_cast<unsigned char>(in[pos + i])}; };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

std::string Reply(char status, const std::string& body) {
  std::string out(1, status);
  PutU32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

/// Token comparison whose time does not depend on where the bytes differ (the length is public).
bool TokenEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

struct Request {
  char op = 0;
  std::string key, value;
};

enum class ParseResult { kNeedMore, kDone, kBadToken, kError };

/// Parses the request received so far. Limits and the token are checked as soon as their bytes
/// arrive, so a refused client never makes the server buffer more than one read.
ParseResult ParseRequest(std::string_view in, std::string_view token, Request* req, std::string* error) {
  auto fail = [&](std::string why) {
    *error = std::move(why);
    return ParseResult::kError;
  };
  if (in.substr(0, kMagic.size()) != kMagic.substr(0, std::min(in.size(), kMagic.size())))
    return fail("not a rendezvous store request (this mltrain speaks protocol " + std::string(kMagic) + ")");
  size_t pos = kMagic.size();
  if (in.size() < pos + 4) return ParseResult::kNeedMore;
  const size_t token_len = GetU32(in, pos);
  if (token_len > kKvMaxTokenBytes)
    return fail("token of " + std::to_string(token_len) + " bytes exceeds the limit of " + std::to_string(kKvMaxTokenBytes));
  pos += 4;
  if (in.size() < pos + token_len) return ParseResult::kNeedMore;
  if (!TokenEquals(in.substr(pos, token_len), token)) return ParseResult::kBadToken;
  pos += token_len;
  if (in.size() < pos + 1) return ParseResult::kNeedMore;
  const char op = in[pos++];
  if (op != 'S' && op != 'G') return fail("unknown operation");
  if (in.size() < pos + 4) return ParseResult::kNeedMore;
  const size_t key_len = GetU32(in, pos);
  if (key_len > kKvMaxKeyBytes)
    return fail("key of " + std::to_string(key_len) + " bytes exceeds the limit of " + std::to_string(kKvMaxKeyBytes));
  pos += 4;
  if (in.size() < pos + key_len) return ParseResult::kNeedMore;
  const size_t key_pos = pos;
  pos += key_len;
  size_t value_pos = pos, value_len = 0;
  if (op == 'S') {
    if (in.size() < pos + 4) return ParseResult::kNeedMore;
    value_len = GetU32(in, pos);
    if (value_len > kKvMaxValueBytes)
      return fail("value of " + std::to_string(value_len) + " bytes exceeds the limit of " + std::to_string(kKvMaxValueBytes));
    value_pos = pos + 4;
    pos = value_pos + value_len;
    if (in.size() < pos) return ParseResult::kNeedMore;
  }
  if (in.size() > pos) return fail("trailing bytes after the request");
  req->op = op;
  req->key.assign(in.substr(key_pos, key_len));
  req->value.assign(in.substr(value_pos, value_len));
  return ParseResult::kDone;
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

/// Reads a u32 length and that many bytes (at most `limit`).
bool RecvField(int fd, std::string& out, size_t limit) {
  char b[4];
  if (!RecvAll(fd, b, 4)) return false;
  const size_t len = GetU32(std::string_view(b, 4), 0);
  if (len > limit) return false;
  out.resize(len);
  return RecvAll(fd, out.data(), len);
}

void SetIoTimeout(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000), static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

std::string AddressText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  if (sa->sa_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  return buf;
}

void SetPort(sockaddr* sa, int port) {
  if (sa->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(sa)->sin_port = htons(static_cast<uint16_t>(port));
  if (sa->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(sa)->sin6_port = htons(static_cast<uint16_t>(port));
}

}  // namespace

struct KvServer::Conn {
  int fd = -1;
  std::string peer;
  std::string in;    // request bytes received so far
  std::string out;   // reply
  size_t sent = 0;
  enum class State { kReading, kReplying, kDraining, kClosed } state = State::kReading;
  std::chrono::steady_clock::time_point deadline;
};

KvServer::KvServer(KvServerOptions options) : options_(std::move(options)), port_(options_.port) {
  if (options_.listen_fd >= 0) Adopt(options_.listen_fd);
  else Bind();
  thread_ = std::thread([this] { Serve(); });
}

void KvServer::Adopt(int fd) {
  const std::string what = "rendezvous store: the reserved socket MLSCHED_RENDEZVOUS_FD=" + std::to_string(fd);
  int type = 0;
  socklen_t type_len = sizeof(type);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  std::string error;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 || type != SOCK_STREAM ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0 ||
      (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
    error = "is not a TCP socket";
  const int bound = error.empty() ? ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                                  : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                  : 0;
  if (error.empty() && bound == 0) error = "is not bound to a port";
  if (error.empty() && options_.port != 0 && bound != options_.port)
    error = "is bound to port " + std::to_string(bound) + ", not MASTER_PORT " + std::to_string(options_.port);
  if (!error.empty()) {
    ::close(fd);
    throw std::runtime_error(what + " " + error);
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (::listen(fd, 128) != 0) {
    const int err = errno;
    ::close(fd);
    const std::string where =
        what + " (" + AddressText(reinterpret_cast<sockaddr*>(&ss)) + " port " + std::to_string(bound) + ")";
    if (err == EADDRINUSE)
      throw RendezvousPortTakenError(where + ": another process already listens on the port (it bound it too and "
                                     "listened first)");
    throw std::runtime_error(where + ": listen: " + std::strerror(err));
  }
  port_ = bound;
  listen_fds_.push_back(fd);
}

void KvServer::Bind() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string where = "'" + options_.address + "' port " + std::to_string(options_.port) + " (MASTER_ADDR:MASTER_PORT)";
  if (int gai = ::getaddrinfo(options_.address.c_str(), nullptr, &hints, &res); gai != 0)
    throw std::runtime_error("rendezvous store: cannot resolve " + where + ": " + gai_strerror(gai));
  std::vector<std::string> bound, foreign;
  std::string error;
  bool taken = false;
  for (addrinfo* ai = res; ai != nullptr && error.empty(); ai = ai->ai_next) {
    const std::string text = AddressText(ai->ai_addr);
    if (std::find(bound.begin(), bound.end(), text) != bound.end()) continue;
    int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    SetPort(ai->ai_addr, port_);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                            : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
      listen_fds_.push_back(fd);
      bound.push_back(text);
      continue;
    }
    const int err = errno;
    ::close(fd);
    if (err == EADDRNOTAVAIL) foreign.push_back(text);
    else error = "cannot listen on " + text + " port " + std::to_string(port_) + ": " + std::strerror(err);
    taken = err == EADDRINUSE;
  }
  ::freeaddrinfo(res);
  if (error.empty() && listen_fds_.empty()) {
    std::string list;
    for (const auto& a : foreign) list += (list.empty() ? "" : ", ") + a;
    error = "it resolves to " + (list.empty() ? std::string("no usable address") : list) +
            ", not an address of this host (rank 0 serves the store on MASTER_ADDR)";
  }
  if (error.empty()) return;
  for (int fd : listen_fds_) ::close(fd);
  listen_fds_.clear();
  if (taken) throw RendezvousPortTakenError("rendezvous store: cannot listen on " + where + ": " + error);
  throw std::runtime_error("rendezvous store: cannot listen on " + where + ": " + error);
}

KvServer::~KvServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  for (int fd : listen_fds_) ::close(fd);
}

void KvServer::Serve() {
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    for (int fd : listen_fds_) fds.push_back({fd, POLLIN, 0});
    for (const Conn& c : conns)
      fds.push_back({c.fd, static_cast<short>(c.state == Conn::State::kReplying ? POLLOUT : POLLIN), 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) {
      LogError(std::string("rendezvous store: poll: ") + std::strerror(errno));
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      const short events = fds[listen_fds_.size() + i].revents;
      if (events != 0 && c.state != Conn::State::kReplying) OnReadable(c);
      if (c.state == Conn::State::kReplying && (events & (POLLOUT | POLLERR | POLLHUP)) != 0) {
        ssize_t w = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (w > 0) c.sent += static_cast<size_t>(w);
        else if (errno != EAGAIN && errno != EINTR) c.state = Conn::State::kClosed;
        if (c.sent == c.out.size()) {
          // Half-close and wait for the client's close, so unread input cannot turn into a reset
          // that would discard the reply before the client reads it.
          ::shutdown(c.fd, SHUT_WR);
          c.state = Conn::State::kDraining;
        }
      }
      if (now > c.deadline) c.state = Conn::State::kClosed;
    }
    std::erase_if(conns, [](const Conn& c) {
      if (c.state == Conn::State::kClosed) ::close(c.fd);
      return c.state == Conn::State::kClosed;
    });
    for (size_t i = 0; i < listen_fds_.size(); ++i)
      if (fds[i].revents & POLLIN) Accept(listen_fds_[i], conns);
  }
  for (const Conn& c : conns) ::close(c.fd);
}

void KvServer::Accept(int listen_fd, std::vector<Conn>& conns) {
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {  // EAGAIN: none left. Out of descriptors: pause instead of spinning on poll.
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    if (conns.size() >= options_.max_connections) {
      const std::string busy = Reply('B', "too many connections (" + std::to_string(options_.max_connections) + ")");
      ssize_t ignored = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL);
      (void)ignored;
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
      continue;
    }
    Conn c;
    c.fd = fd;
    c.peer = AddressText(reinterpret_cast<sockaddr*>(&ss));
    c.deadline = std::chrono::steady_clock::now() + options_.connection_timeout;
    conns.push_back(std::move(c));
  }
}

void KvServer::OnReadable(Conn& c) {
  char buf[kReadChunk];
  ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (r <= 0) {  // the client closed (or failed) before a complete request, or after our reply
    c.state = Conn::State::kClosed;
    return;
  }
  if (c.state == Conn::State::kDraining) return;  // discard: the reply is out
  c.in.append(buf, static_cast<size_t>(r));
  Request req;
  std::string error;
  switch (ParseRequest(c.in, options_.token, &req, &error)) {
    case ParseResult::kNeedMore:
      return;
    case ParseResult::kBadToken:
      if (rejected_.fetch_add(1) == 0)
        LogWarn("rendezvous store: refused a connection from " + c.peer +
                " with a wrong token (MLSCHED_RENDEZVOUS_TOKEN); further refusals are only counted");
      return Refuse(c, "wrong rendezvous token (this rank's MLSCHED_RENDEZVOUS_TOKEN is not rank 0's: another job or attempt?)");
    case ParseResult::kError:
      return Refuse(c, error);
    case ParseResult::kDone:
      break;
  }
  c.in.clear();
  c.in.shrink_to_fit();
  if (req.op == 'G') {
    auto it = data_.find(req.key);
    c.out = it == data_.end() ? std::string("N") : Reply('F', it->second);
  } else {
    auto it = data_.find(req.key);
    const size_t old_bytes = it == data_.end() ? 0 : req.key.size() + it->second.size();
    const size_t new_bytes = req.key.size() + req.value.size();
    if (stored_bytes_.load() - old_bytes + new_bytes > options_.max_store_bytes)
      return Refuse(c, "store full: " + std::to_string(stored_bytes_.load()) + " bytes held, limit " +
                           std::to_string(options_.max_store_bytes));
    stored_bytes_.store(stored_bytes_.load() - old_bytes + new_bytes);
    data_[req.key] = std::move(req.value);
    c.out = "K";
  }
  c.state = Conn::State::kReplying;
}

void KvServer::Refuse(Conn& c, const std::string& message) {
  c.in.clear();
  c.in.shrink_to_fit();
  c.out = Reply('E', message);
  c.state = Conn::State::kReplying;
}

KvClient::KvClient(std::string host, int port, std::string token, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), token_(std::move(token)), timeout_(timeout) {}

std::string KvClient::Request(char op, const std::string& key, const std::string* value) {
  if (key.size() > kKvMaxKeyBytes)
    throw std::length_error("rendezvous store: key of " + std::to_string(key.size()) + " bytes exceeds the limit of " +
                            std::to_string(kKvMaxKeyBytes));
  if (value != nullptr && value->size() > kKvMaxValueBytes)
    throw std::length_error("rendezvous store: value of " + std::to_string(value->size()) + " bytes exceeds the limit of " +
                            std::to_string(kKvMaxValueBytes));
  std::string frame(kMagic);
  PutU32(frame, static_cast<uint32_t>(token_.size()));
  frame += token_;
  frame += op;
  PutU32(frame, static_cast<uint32_t>(key.size()));
  frame += key;
  if (value != nullptr) {
    PutU32(frame, static_cast<uint32_t>(value->size()));
    frame += *value;
  }
  const std::string where = "rendezvous store at " + host_ + ":" + std::to_string(port_) + " (rank 0, MASTER_ADDR:MASTER_PORT)";
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::string last_error = "no attempt";
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (gai != 0) last_error = std::string("cannot resolve MASTER_ADDR: ") + gai_strerror(gai);
    for (addrinfo* ai = gai == 0 ? res : nullptr; ai != nullptr; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      SetIoTimeout(fd, std::chrono::milliseconds(5000));
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        last_error = std::strerror(errno);
        ::close(fd);
        continue;
      }
      // A refusing server may answer and close before reading everything: read its reply anyway.
      SendAll(fd, frame.data(), frame.size());
      char status = 0;
      std::string body;
      bool ok = RecvAll(fd, &status, 1);
      if (ok && status == 'F') ok = RecvField(fd, body, kKvMaxValueBytes);
      if (ok && (status == 'E' || status == 'B')) ok = RecvField(fd, body, kMaxMessageBytes);
      ::close(fd);
      if (ok && status == 'E') {
        ::freeaddrinfo(res);
        throw PeerLostError(where + " refused the request: " + body);
      }
      if (ok && (status == 'K' || status == 'N' || status == 'F')) {
        ::freeaddrinfo(res);
        return std::string(1, status) + body;
      }
      last_error = ok && status == 'B' ? "store busy: " + body : "connection dropped by the store";
    }
    if (res != nullptr) ::freeaddrinfo(res);
    if (std::chrono::steady_clock::now() + backoff > deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  throw PeerLostError(where + " unreachable for " + std::to_string(timeout_.count() / 1000.0) + " s: " + last_error);
}

void KvClient::Set(const std::string& key, const std::string& value) { Request('S', key, &value); }

std::optional<std::string> KvClient::TryGet(const std::string& key) {
  std::string reply = Request('G', key, nullptr);
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
