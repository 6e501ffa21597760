// Who is calling schedd. Unix-socket connections are accepted by schedd itself so the kernel's
// SO_PEERCRED credentials can be recorded before the fd is handed to gRPC
// (grpc::AddInsecureChannelFromFd); TCP connections are TLS, users prove who they are with a MUNGE
// credential in every call, and agents with a node certificate from the cluster CA.
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
#include "schedd/server/metrics.h"

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

/// How schedd checks callers (docs/operations.md, "Security model").
struct AuthConfig {
  std::string munge_socket;  // munged that decodes TCP callers' credentials
};

/// Resolves who is calling: SO_PEERCRED on the Unix socket; on TCP a MUNGE credential made for
/// this very RPC (uid/gid from munged, never from the client's words), or for the agent stream a
/// node certificate verified by TLS against the cluster CA.
class Authenticator {
 public:
  Authenticator(PeerCredListener* unix_listener, AuthConfig cfg, std::function<bool(const std::string&)> is_operator);
  /// Fills `out` for a call of `rpc` ("mlsched.v1.JobService/SubmitJob"), or returns
  /// UNAUTHENTICATED with the reason (missing, expired, replayed or foreign credential, munged down).
  grpc::Status Authenticate(grpc::ServerContext* ctx, const std::string& rpc, Caller* out) const;
  /// Checks that the peer may speak for `node` on the agent stream: on the Unix socket a
  /// privileged user (root, schedd's user, an operator); on TCP a verified client certificate whose
  /// common name or DNS subjectAltName is `node`. `identity` gets a name for logs ("cert:CN=n1").
  grpc::Status AuthenticateAgent(grpc::ServerContext* ctx, const std::string& node, std::string* identity) const;
  /// Where refusals are counted (mlsched_rejected_requests_total{reason="authentication"}).
  void SetMetrics(SchedMetrics* m) { metrics_ = m; }

 private:
  grpc::Status Reject(grpc::StatusCode code, std::string why, grpc::ServerContext* ctx) const;
  PeerCredListener* listener_;
  AuthConfig cfg_;
  std::function<bool(const std::string&)> is_operator_;
  SchedMetrics* metrics_ = nullptr;
};

/// The user name of a uid ("uid1234" when it has none).
std::string UserName(uint32_t uid);

}  // namespace mlsched::server
