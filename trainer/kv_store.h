// The rendezvous key-value store: rank 0 serves it over TCP on MASTER_PORT; every rank (rank 0
// included) is a client. It backs Gloo's rendezvous::Store and would carry the NCCL unique id.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <atomic>
#include <vector>

namespace mltrain {

/// A tiny TCP key-value server (one request per connection: 'S' set or 'G' get, length-prefixed
/// big-endian u32 fields). Runs on a background thread until destroyed.
class KvServer {
 public:
  /// Listens on all interfaces at `port` (0 picks a free port). Throws std::runtime_error naming
  /// the port when it cannot bind (e.g. another job uses MASTER_PORT).
  explicit KvServer(int port);
  ~KvServer();
  KvServer(const KvServer&) = delete;
  KvServer& operator=(const KvServer&) = delete;

  /// The port actually bound.
  int port() const { return port_; }

 private:
  void Serve();
  void HandleConnection(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::string> data_;
  std::thread thread_;
};

/// Client of a KvServer. Every call retries the connection until its deadline (rank 0 may start
/// its server after the other ranks) and throws PeerLostError when the deadline passes.
class KvClient {
 public:
  KvClient(std::string host, int port, std::chrono::milliseconds timeout);

  /// Stores `value` (any bytes) under `key`, replacing an earlier value.
  void Set(const std::string& key, const std::string& value);
  /// The value of `key`, or nullopt when it is not set yet.
  std::optional<std::string> TryGet(const std::string& key);
  /// Polls until every key is set or `timeout` passes; then throws PeerLostError listing the
  /// missing keys.
  void WaitAll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::string Request(const std::string& frame);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
};

}  // namespace mltrain
