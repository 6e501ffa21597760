// The rendezvous store under attack: clients without the token, oversized input, too many or
// stalled connections, and the address it listens on. Raw frames are built here from the wire
// format documented in kv_store.h, so a regression in either side shows up.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <thread>

#include "trainer/kv_store.h"
#include "trainer/log.h"

using namespace mltrain;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

KvServerOptions Options(const std::string& address = "127.0.0.1") {
  KvServerOptions o;
  o.address = address;
  o.token = kToken;
  return o;
}

void PutU32(std::string& out, uint32_t v) {
  for (int shift : {24, 16, 8, 0}) out += static_cast<char>((v >> shift) & 0xff);
}

/// A request frame: "MKV2" | u32 token length | token | op | u32 key length | key [| u32 value length | value].
std::string Frame(const std::string& token, char op, const std::string& key, const std::string* value = nullptr) {
  std::string f = "MKV2";
  PutU32(f, static_cast<uint32_t>(token.size()));
  f += token;
  f += op;
  PutU32(f, static_cast<uint32_t>(key.size()));
  f += key;
  if (value != nullptr) {
    PutU32(f, static_cast<uint32_t>(value->size()));
    f += *value;
  }
  return f;
}

/// Connects to ip:port; -1 with errno set when refused.
int Connect(const char* ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/// Everything the server sends until it closes the connection (at most 2 s).
std::string ReadUntilClosed(int fd) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) return out;
    out.append(buf, static_cast<size_t>(r));
  }
  return out + "<still open>";
}

/// Sends raw bytes on a fresh connection to 127.0.0.1:port; returns the whole answer.
std::string RawExchange(int port, const std::string& bytes) {
  int fd = Connect("127.0.0.1", port);
  REQUIRE(fd >= 0);
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string reply = ReadUntilClosed(fd);
  ::close(fd);
  return reply;
}

}  // namespace

TEST_CASE("Rendezvous store: without the token nobody reads or writes a key", "[trainer][kv]") {
  KvServer server(Options());
  KvClient rank0("127.0.0.1", server.port(), kToken, 2s);
  rank0.Set("mlsched/7/1/gloo/0", "address of rank 0");
  const size_t bytes = server.stored_bytes();

  const std::string wrong = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";
  KvClient intruder("127.0.0.1", server.port(), wrong, 5s);
  auto start = std::chrono::steady_clock::now();
  try {
    intruder.Set("mlsched/7/1/gloo/0", "address of the intruder");
    FAIL("a wrong token was accepted");
  } catch (const PeerLostError& e) {
    std::string what = e.what();
    CHECK(what.find("wrong rendezvous token") != std::string::npos);
    CHECK(what.find(kToken) == std::string::npos);
    CHECK(what.find(wrong) == std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < 2s);  // refused at once, not retried until the deadline
  CHECK_THROWS_AS(intruder.TryGet("mlsched/7/1/gloo/0"), PeerLostError);
  KvClient anonymous("127.0.0.1", server.port(), "", 5s);
  CHECK_THROWS_WITH(anonymous.TryGet("mlsched/7/1/gloo/0"), Catch::Contains("wrong rendezvous token"));
  // A token that is a prefix of the right one is wrong too.
  KvClient prefix("127.0.0.1", server.port(), kToken.substr(0, 32), 5s);
  CHECK_THROWS_AS(prefix.Set("other", "x"), PeerLostError);

  // The unauthenticated protocol of earlier versions ('S' | key | value) is refused with an error.
  std::string legacy = "S";
  PutU32(legacy, 1);
  legacy += "k";
  PutU32(legacy, 1);
  legacy += "v";
  std::string reply = RawExchange(server.port(), legacy);
  REQUIRE_FALSE(reply.empty());
  CHECK(reply[0] == 'E');
  // Raw frames with a wrong token get the same answer and nothing else.
  std::string value = "evil";
  reply = RawExchange(server.port(), Frame(wrong, 'S', "mlsched/7/1/gloo/0", &value));
  REQUIRE_FALSE(reply.empty());
  CHECK(reply[0] == 'E');
  CHECK(reply.find("wrong rendezvous token") != std::string::npos);

  CHECK(rank0.TryGet("mlsched/7/1/gloo/0") == "address of rank 0");
  CHECK_FALSE(rank0.TryGet("other"));
  CHECK(server.stored_bytes() == bytes);
  CHECK(server.rejected_connections() == 5);
}

TEST_CASE("Rendezvous store: oversized tokens, keys and values are refused and the server lives on", "[trainer][kv]") {
  KvServerOptions options = Options();
  options.max_store_bytes = 100;
  KvServer server(options);
  KvClient client("127.0.0.1", server.port(), kToken, 2s);
  client.Set("a", std::string(59, 'x'));  // 60 bytes with its key

  CHECK_THROWS_AS(client.Set(std::string(kKvMaxKeyBytes + 1, 'k'), "v"), std::length_error);
  CHECK_THROWS_AS(client.TryGet(std::string(kKvMaxKeyBytes + 1, 'k')), std::length_error);
  CHECK_THROWS_AS(client.Set("k", std::string(kKvMaxValueBytes + 1, 'v')), std::length_error);

  // Raw frames announcing too much are refused from their length fields alone.
  std::string huge_token = "MKV2";
  PutU32(huge_token, 0x7fffffff);
  std::string reply = RawExchange(server.port(), huge_token);
  CHECK(reply.rfind("E", 0) == 0);
  CHECK(reply.find("token of 2147483647 bytes exceeds the limit of 256") != std::string::npos);

  std::string big_key = Frame(kToken, 'S', "");
  big_key.resize(big_key.size() - 4);
  PutU32(big_key, static_cast<uint32_t>(kKvMaxKeyBytes + 1));
  reply = RawExchange(server.port(), big_key);
  CHECK(reply.find("key of 4097 bytes exceeds the limit of 4096") != std::string::npos);

  std::string big_value = Frame(kToken, 'S', "k");
  PutU32(big_value, static_cast<uint32_t>(kKvMaxValueBytes + 1));
  reply = RawExchange(server.port(), big_value);
  CHECK(reply.find("value of 16777217 bytes exceeds the limit of 16777216") != std::string::npos);

  reply = RawExchange(server.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(reply.find("not a rendezvous store request") != std::string::npos);
  reply = RawExchange(server.port(), Frame(kToken, 'D', "a"));
  CHECK(reply.find("unknown operation") != std::string::npos);

  // The store's total size is capped; replacing a value with one of the same size still fits.
  CHECK_THROWS_WITH(client.Set("b", std::string(59, 'y')), Catch::Contains("store full"));
  client.Set("a", std::string(59, 'z'));
  CHECK(client.TryGet("a") == std::string(59, 'z'));
  CHECK_FALSE(client.TryGet("b"));
  CHECK(server.stored_bytes() == 60);
  CHECK(server.rejected_connections() == 0);  // none of these had a wrong token
}

TEST_CASE("Rendezvous store: a connection cap, and stalled connections are closed", "[trainer][kv]") {
  KvServerOptions options = Options();
  options.max_connections = 2;
  options.connection_timeout = 700ms;
  KvServer server(options);
  int stalled[2] = {Connect("127.0.0.1", server.port()), Connect("127.0.0.1", server.port())};
  REQUIRE(stalled[0] >= 0);
  REQUIRE(stalled[1] >= 0);
  std::this_thread::sleep_for(150ms);  // both accepted, neither sends its handshake

  KvClient client("127.0.0.1", server.port(), kToken, 300ms);
  CHECK_THROWS_WITH(client.Set("k", "v"), Catch::Contains("too many connections (2)"));

  // The server closes them at its deadline; then there is room again.
  auto start = std::chrono::steady_clock::now();
  for (int fd : stalled) {
    CHECK(ReadUntilClosed(fd).empty());
    ::close(fd);
  }
  CHECK(std::chrono::steady_clock::now() - start < 1500ms);
  client.Set("k", "v");
  CHECK(client.TryGet("k") == "v");
}

TEST_CASE("Rendezvous store: listens on the advertised address only, never on all interfaces", "[trainer][kv]") {
  // All of 127.0.0.0/8 is loopback on Linux: a wildcard listener would answer on 127.0.0.2 too.
  KvServer server(Options("127.0.0.1"));
  int fd = Connect("127.0.0.2", server.port());
  CHECK(fd < 0);
  CHECK(errno == ECONNREFUSED);
  KvClient client("127.0.0.1", server.port(), kToken, 1s);
  client.Set("k", "v");

  KvServerOptions other = Options("127.0.0.2");
  other.port = server.port();  // the same port on another address is free
  KvServer second(other);
  KvClient client2("127.0.0.2", second.port(), kToken, 1s);
  CHECK_FALSE(client2.TryGet("k"));

  // An address that is not this host's is a clear error, as is a port in use.
  CHECK_THROWS_WITH(KvServer(Options("192.0.2.1")), Catch::Contains("not an address of this host"));
  KvServerOptions taken = Options("127.0.0.1");
  taken.port = server.port();
  CHECK_THROWS_WITH(KvServer(taken), Catch::Contains("cannot listen on 127.0.0.1 port " + std::to_string(server.port())));
  CHECK_THROWS_AS(KvServer(taken), RendezvousPortTakenError);  // mltrain exits 75: requeue, not fail
}

namespace {

/// A TCP socket on 127.0.0.1:`port` with SO_REUSEADDR, bound, not listening (agentd's reservation
/// with port 0); -1 when the bind fails.
int BoundSocket(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int PortOf(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("Rendezvous store: listens at once on agentd's reserved socket, a port someone listened on first is 'taken'",
          "[trainer][kv]") {
  KvServerOptions o = Options();
  o.listen_fd = BoundSocket(0);
  REQUIRE(o.listen_fd >= 0);
  o.port = PortOf(o.listen_fd);
  {
    KvServer server(o);
    CHECK(server.port() == o.port);
    KvClient client("127.0.0.1", o.port, kToken, 1s);
    client.Set("k", "v");
    CHECK(client.TryGet("k") == "v");
    CHECK(BoundSocket(o.port) < 0);  // it listens: no squatter can bind the port now, even with SO_REUSEADDR
  }

  // Between the reservation and rank 0's start, someone bound the port too and listened first.
  const int reserved = BoundSocket(0);
  REQUIRE(reserved >= 0);
  const int squatter = BoundSocket(PortOf(reserved));
  REQUIRE(squatter >= 0);
  REQUIRE(::listen(squatter, 8) == 0);
  o.listen_fd = reserved;
  o.port = PortOf(reserved);
  CHECK_THROWS_AS(KvServer(o), RendezvousPortTakenError);
  CHECK(::fcntl(reserved, F_GETFD) == -1);  // the server owned it and closed it
  ::close(squatter);

  // Anything but a bound TCP socket on MASTER_PORT is refused, naming the variable.
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  ::close(pipe_fds[1]);
  o.listen_fd = pipe_fds[0];
  CHECK_THROWS_WITH(KvServer(o), Catch::Contains("MLSCHED_RENDEZVOUS_FD=") && Catch::Contains("is not a TCP socket"));
  o.listen_fd = BoundSocket(0);
  o.port = PortOf(o.listen_fd) == 65535 ? 1 : PortOf(o.listen_fd) + 1;
  CHECK_THROWS_WITH(KvServer(o), Catch::Contains("not MASTER_PORT " + std::to_string(o.port)));
}
