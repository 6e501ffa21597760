// Who is calling schedd. Unix-socket connections are accepted by schedd itself so the kernel's
// SO_PEERCRED credentials can be recorded before the fd is handed to gRPC
// (grpc::AddInsecureChannelFromFd); TCP connections are TLS, users prove who they are with a MUNGE
// credential in every call, and agents with a node certificate from the cluster CA.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>
#include <chrono>
#include <deque>
#include <optional>
#include <map>
#include <memory>
#include <set>
#include <mutex>
#include <string>
#include <thread>

#include "common/munge.h"
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
  /// Connections whose client had already hung up when they were accepted, closed without a gRPC
  /// transport. In a reconnect storm of thousands of agents most queued connections are such
  /// stale attempts; setting up a transport for each (milliseconds apiece) kept the queue full of
  /// them until no agent got through (issue 30, 10,000 nodes).
  uint64_t Abandoned() const { return abandoned_; }

 private:
  void AcceptLoop(grpc::Server* server);
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> abandoned_{0};
  std::thread thread_;
  std::mutex mu_;
  std::map<int, struct ucred> creds_;
};

/// How schedd checks callers (docs/operations.md, "Security model").
struct AuthConfig {
  std::string munge_socket;  // munged that decodes TCP callers' credentials
};

/// MUNGE credentials MungeAuthProcessor decoded, waiting for their call's handler: keyed by the
/// credential itself (each call carries its own; munged decodes a credential only once), taken
/// once, dropped after kTtl unclaimed (a call cancelled before its handler ran), at most kMax
/// held (the oldest go first). The auth context cannot carry them: gRPC shares it between all the
/// calls of one connection. Thread-safe.
class VerifiedCredentials {
 public:
  static constexpr std::chrono::seconds kTtl{60};
  static constexpr size_t kMax = 16384;
  /// Keeps `id` for `credential`, verified at `now`.
  void Put(const std::string& credential, const MungeIdentity& id, std::chrono::steady_clock::time_point now);
  /// The identity verified for `credential`, removed; nullopt when none is held.
  std::optional<MungeIdentity> Take(const std::string& credential);
  size_t Size();

 private:
  struct Entry {
    MungeIdentity id;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mu_;
  std::map<std::string, Entry> by_credential_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> order_;  // oldest first
};

/// Checks a TCP caller from its initial metadata, before gRPC reads the request body (an
/// AuthMetadataProcessor on the TLS listener): the call carries a MUNGE credential that munged
/// decodes (its identity is kept in `verified` for the handler, Authenticator::Authenticate), or
/// the peer presented a client certificate the TLS handshake verified against the cluster CA
/// (agents). Anything else is UNAUTHENTICATED at once, so a stranger's request is never buffered
/// or parsed (a request still costs at most HTTP/2's stream window in the transport). Blocking:
/// munged is asked over its socket.
class MungeAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  /// `metrics` may be null; refusals count as mlsched_rejected_requests_total{reason="authentication"}.
  MungeAuthProcessor(std::string munge_socket, std::shared_ptr<VerifiedCredentials> verified, SchedMetrics* metrics)
      : socket_(std::move(munge_socket)), verified_(std::move(verified)), metrics_(metrics) {}
  bool IsBlocking() const override { return true; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata* response) override;

 private:
  std::string socket_;
  std::shared_ptr<VerifiedCredentials> verified_;
  SchedMetrics* metrics_;
};

/// The node certificates a CRL revokes (schedd --tls-crl: a PEM CRL signed by the cluster CA,
/// e.g. from scripts/mlsched-certs.sh revoke), re-read when the file changes (looked at, at most
/// every kCertRefreshSeconds). A file that turns unreadable or invalid is logged and the last good
/// list stays in force. Thread-safe.
class RevocationList {
 public:
  /// Throws std::runtime_error when the CRL cannot be read or is not signed by the CA at start.
  RevocationList(std::string crl_file, std::string ca_file);
  /// True when `serial` (tls.h CertificateSerial) is revoked.
  bool Revoked(const std::string& serial);
  /// Certificates revoked now.
  size_t Size();

 private:
  void LoadLocked();
  std::string crl_file_, ca_file_;
  std::mutex mu_;
  std::set<std::string> revoked_;
  std::string stamp_;
  std::chrono::steady_clock::time_point checked_{};
};

/// Resolves who is calling: SO_PEERCRED on the Unix socket; on TCP a MUNGE credential made for
/// this very RPC (uid/gid from munged, never from the client's words), or for the agent stream a
/// node certificate verified by TLS against the cluster CA.
class Authenticator {
 public:
  Authenticator(PeerCredListener* unix_listener, AuthConfig cfg, std::function<bool(const std::string&)> is_operator);
  /// Fills `out` for a call of `rpc` ("mlsched.v1.JobService/SubmitJob"), or returns
  /// UNAUTHENTICATED with the reason (missing, expired, replayed or foreign credential, munged down).
  grpc::Status Authenticate(grpc::ServerContextBase* ctx, const std::string& rpc, Caller* out) const;
  /// Checks that the peer may speak for `node` on the agent stream: on the Unix socket a
  /// privileged user (root, schedd's user, an operator); on TCP a verified client certificate whose
  /// common name or DNS subjectAltName is `node` and whose serial the CRL (SetCrl) does not list.
  /// `identity` gets a name for logs ("cert:CN=n1"); `declared_only` is set for an operator on
  /// the Unix socket, who may register only nodes the inventory names.
  grpc::Status AuthenticateAgent(grpc::ServerContextBase* ctx, const std::string& node, std::string* identity,
                                 bool* declared_only) const;
  /// Where refusals are counted (mlsched_rejected_requests_total{reason="authentication"}).
  void SetMetrics(SchedMetrics* m) { metrics_ = m; }
  /// The credentials MungeAuthProcessor verified on the TCP listener (set before the server
  /// starts); without it TCP calls are decoded here (tests that serve TCP without the processor).
  void SetVerifiedCredentials(std::shared_ptr<VerifiedCredentials> v) { verified_ = std::move(v); }
  /// Node certificates to refuse (set before the server starts; null = none).
  void SetRevocationList(std::shared_ptr<RevocationList> crl) { crl_ = std::move(crl); }
  /// True when the call's peer certificate is revoked (or unparsable); false without one.
  bool AgentRevoked(grpc::ServerContextBase* ctx) const;
  /// The serial of the call's peer certificate ("" without one), for SerialRevoked.
  std::string PeerSerial(grpc::ServerContextBase* ctx) const;
  /// True when `serial` is revoked now (an agent stream re-checks on every message).
  bool SerialRevoked(const std::string& serial) const { return crl_ && !serial.empty() && crl_->Revoked(serial); }

 private:
  grpc::Status Reject(grpc::StatusCode code, std::string why, grpc::ServerContextBase* ctx) const;
  PeerCredListener* listener_;
  AuthConfig cfg_;
  std::function<bool(const std::string&)> is_operator_;
  SchedMetrics* metrics_ = nullptr;
  std::shared_ptr<RevocationList> crl_;
  std::shared_ptr<VerifiedCredentials> verified_;
};

/// The user name of a uid ("uid1234" when it has none).
std::string UserName(uint32_t uid);

}  // namespace mlsched::server
