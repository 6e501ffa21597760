// The rendezvous key-value store: rank 0 serves it over TCP on MASTER_ADDR:MASTER_PORT; every rank
// (rank 0 included) is a client. It backs Gloo's rendezvous::Store and carries the NCCL unique id.
// Every connection must present the attempt's secret (MLSCHED_RENDEZVOUS_TOKEN), so another local
// user can neither read nor overwrite keys, and every size and count it accepts is bounded.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mltrain {

/// Longest token a client may present (bytes). agentd's tokens are 64 hex digits.
inline constexpr size_t kKvMaxTokenBytes = 256;
/// Longest key (bytes). Keys are "mlsched/<job>/<attempt>/gloo/<rank>" and the like.
inline constexpr size_t kKvMaxKeyBytes = 4096;
/// Largest value (bytes). Gloo's full-mesh rendezvous stores 136 bytes per peer under each rank's
/// key (8.9 MB at WORLD_SIZE 65536); the NCCL unique id is 128 bytes.
inline constexpr size_t kKvMaxValueBytes = 16u << 20;
/// Default cap on the bytes of all keys and values held by one server.
inline constexpr size_t kKvMaxStoreBytes = 1u << 30;
/// Default cap on connections open at once; further connections get a "busy" reply (clients retry).
inline constexpr size_t kKvMaxConnections = 1024;
/// Default time a connection has, from accept, to send its whole request and read the reply;
/// a connection that stalls (e.g. never completes its handshake) is closed after it.
inline constexpr std::chrono::milliseconds kKvConnectionTimeout{10000};

/// The store's port is taken: another socket already listens on it (EADDRINUSE), e.g. a process
/// that bound MASTER_PORT with SO_REUSEADDR and listened before rank 0. Not the job's fault and
/// gone with the next attempt's fresh port: mltrain exits 75 (requeue), never 1 (failed).
class RendezvousPortTakenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Settings of a KvServer.
struct KvServerOptions {
  /// Host name or address to listen on (MASTER_ADDR): the server binds every local address it
  /// resolves to, never the wildcard address unless given one ("0.0.0.0").
  std::string address = "127.0.0.1";
  int port = 0;       ///< 0 picks a free port
  /// A TCP socket already bound to MASTER_ADDR:MASTER_PORT and not listening (agentd's reserved
  /// rendezvous port, MLSCHED_RENDEZVOUS_FD): the server listens on it at once instead of binding
  /// `address`:`port`, and owns it from then on (closed on failure too). -1 = bind.
  int listen_fd = -1;
  std::string token;  ///< every request must carry exactly this; empty only for unauthenticated runs
  size_t max_connections = kKvMaxConnections;
  size_t max_store_bytes = kKvMaxStoreBytes;
  std::chrono::milliseconds connection_timeout = kKvConnectionTimeout;
};

/// A tiny TCP key-value server. One request per connection:
///   "MKV2" | u32 token length | token | 'S' or 'G' | u32 key length | key | ('S' only) u32 value
///   length | value,
/// lengths big-endian. Replies: 'K' stored, 'N' not set, 'F' u32 length + value, 'E' u32 length +
/// message (refused: wrong token, over a limit, malformed; the connection is closed), 'B' u32
/// length + message (too many connections; try again). A wrong token is counted and logged once,
/// never with its value. One background thread polls all connections (non-blocking), so a stalled
/// client cannot hold up the others; it runs until the server is destroyed.
class KvServer {
 public:
  /// Starts listening, on options.listen_fd or on the addresses of options.address. Throws
  /// RendezvousPortTakenError when another socket already listens on the port (EADDRINUSE), and
  /// std::runtime_error naming the address and port for anything else (MASTER_ADDR is not an
  /// address of this host; listen_fd is not a bound TCP socket, or is bound to a port other than
  /// options.port when that is set).
  explicit KvServer(KvServerOptions options);
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  /// The port actually bound.
  int port() const { return port_; }
  /// Connections refused for a missing or wrong token so far.
  size_t rejected_connections() const { return rejected_.load(); }
  /// Bytes of all stored keys and values.
  size_t stored_bytes() const { return stored_bytes_.load(); }

 private:
  struct Conn;
  void Bind();                 // options_.address:port
  void Adopt(int listen_fd);   // options_.listen_fd
  void Serve();
  void Accept(int listen_fd, std::vector<Conn>& conns);
  void OnReadable(Conn& c);
  void Refuse(Conn& c, const std::string& message);

  KvServerOptions options_;
  std::vector<int> listen_fds_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> rejected_{0};
  std::atomic<size_t> stored_bytes_{0};
  std::map<std::string, std::string> data_;  // touched only by the serving thread
  std::thread thread_;
};

/// Client of a KvServer. Every call retries the connection until its deadline (rank 0 may start
/// its server after the other ranks; a busy server is retried too) and throws PeerLostError when
/// the deadline passes, or at once when the server refuses the request (e.g. a wrong token: this
/// rank belongs to another attempt). Keys over kKvMaxKeyBytes and values over kKvMaxValueBytes
/// throw std::length_error without contacting the server.
class KvClient {
 public:
  KvClient(std::string host, int port, std::string token, std::chrono::milliseconds timeout);

  /// Stores `value` (any bytes) under `key`, replacing an earlier value.
  void Set(const std::string& key, const std::string& value);
  /// The value of `key`, or nullopt when it is not set yet.
  std::optional<std::string> TryGet(const std::string& key);
  /// Polls until every key is set or `timeout` passes; then throws PeerLostError listing the
  /// missing keys.
  void WaitAll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::string Request(char op, const std::string& key, const std::string* value);

  std::string host_;
  int port_;
  std::string token_;
  std::chrono::milliseconds timeout_;
};

}  // namespace mltrain
