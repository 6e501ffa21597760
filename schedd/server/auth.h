// Who is calling schedd. Unix-socket connections are accepted by schedd itself so the kernel's
// SO_PEERCRED credentials can be recorded before the fd is handed to gRPC
// (grpc::AddInsecureChannelFromFd); TCP callers present a shared token and name their user.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "schedd/server/controller.h"

namespace mlsched::server {

/// Accepts connections on a Unix socket, records each peer's uid/gid/pid by fd, and hands the fd to
/// the gRPC server. The socket file is created mode 0666 (every local user may submit).
class PeerCredListener {
 public:
  /// Binds `path` (removing a stale socket file, creating the parent directory). Throws
  /// std::runtime_error naming the path and errno text on failure.
  explicit PeerCredListener(std::string path);
  ~PeerCredListener();
  /// Starts accepting into `server` (which must already be started).
  void Start(grpc::Server* server);
  void Stop();
  /// Credentials of the gRPC peer string ("fd:N"), if it came through this listener.
  bool Lookup(const std::string& peer, struct ucred* out);

 private:
  void AcceptLoop(grpc::Server* server);
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<int, struct ucred> creds_;
};

/// Resolves a call's Caller: SO_PEERCRED on the Unix socket, token + user header on TCP.
class Authenticator {
 public:
  static constexpr const char* kTokenHeaderName = "x-mlsched-token";
  static constexpr const char* kUserHeaderName = "x-mlsched-user";
  Authenticator(PeerCredListener* unix_listener, std::string tcp_token, std::function<bool(const std::string&)> is_operator);
  /// Fills `out`, or returns UNAUTHENTICATED with the reason.
  grpc::Status Authenticate(grpc::ServerContext* ctx, Caller* out) const;

 private:
  PeerCredListener* listener_;
  std::string token_;
  std::function<bool(const std::string&)> is_operator_;
};

/// The user name of a uid ("uid1234" when it has none).
std::string UserName(uint32_t uid);

}  // namespace mlsched::server
