// A small synchronous client of etcd's v3 API (KV, Lease, Auth) for schedd's HA mode, over the
// gRPC stubs generated from Debian's golang-etcd-server-dev protos. It fails over between the
// cluster's endpoints: a call that finds its endpoint unreachable tries the next one, until the
// call's deadline. It speaks TLS with a client certificate (etcd --client-cert-auth) and may also
// log in as an etcd RBAC user; a TLS file that cannot be read never turns into a plaintext channel.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/tls.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace mlsched::server {

namespace etcdpb = ::etcdserverpb;

/// An etcd call that failed on every endpoint, or that etcd refused; `what()` names the call, the
/// endpoint and etcd's message.
struct EtcdError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// etcd's own limits (etcd 3.4 defaults), which every transaction schedd sends respects.
inline constexpr size_t kEtcdMaxTxnOps = 128;               // --max-txn-ops
inline constexpr size_t kEtcdMaxRequestBytes = 1536 * 1024;  // --max-request-bytes (1.5 MiB)

/// Parses an --ha value: "etcd://HOST:PORT,HOST:PORT,..." (or without the scheme) into endpoints;
/// at most 16, each HOST:PORT with a port in 1..65535. Throws std::invalid_argument naming the
/// bad entry.
std::vector<std::string> ParseEtcdEndpoints(const std::string& value);

/// The smallest key greater than every key that starts with `prefix` (etcd's range_end of a
/// prefix range).
std::string PrefixEnd(const std::string& prefix);

/// How schedd checks etcd and proves itself to it (docs/operations.md, "Securing etcd").
struct EtcdSecurity {
  /// TLS when `tls.ca` is set: etcd's members must present a certificate from that CA naming the
  /// endpoint's host; `tls.cert`/`tls.key` are schedd's etcd client certificate (etcd
  /// --client-cert-auth; with etcd's auth enabled its common name is the etcd user). The files
  /// are re-read when they change (checked at most every kCertRefreshSeconds). Empty `ca`:
  /// plaintext (schedd allows that only with --ha-insecure).
  mlsched::TlsFiles tls;
  /// etcd RBAC user to log in as (etcd's Authenticate; the token rides on every call and is
  /// renewed when etcd says it expired). "" = no password login.
  std::string user;
  /// File whose first line is `user`'s password (at most kMaxPasswordBytes; mode 0600).
  std::string password_file;
  bool tls_enabled() const { return !tls.ca.empty(); }
};
/// Largest etcd password read from EtcdSecurity::password_file (bytes).
inline constexpr size_t kMaxPasswordBytes = 1024;

class EtcdClient {
 public:
  /// `endpoints`: HOST:PORT of etcd members. `timeout`: deadline of one call, over all the
  /// endpoints it tries. `security`: TLS and login (EtcdSecurity). Throws std::runtime_error when
  /// a TLS or password file cannot be read (never falls back to plaintext).
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout, EtcdSecurity security = {});
  ~EtcdClient();

  /// One Range call (linearizable read). Throws EtcdError.
  etcdpb::RangeResponse Range(const etcdpb::RangeRequest& req);
  /// Every key under `prefix`, read in pages of `page` keys at one revision (a consistent
  /// snapshot): `*revision` when it is given and > 0 (read serializable at it), else the newest
  /// (a linearizable first page), which `*revision` then gets. Throws EtcdError. Each page is one
  /// call under the client's deadline: 1,000 keys (~1 MB of job specs) by default. Pages of
  /// 10,000 (~10 MB) passed the 3 s deadline on a loaded host, and a new leader that cannot load
  /// its state steps down: after a takeover with 500 TLS nodes reconnecting no replica ever led.
  std::vector<mvccpb::KeyValue> RangePrefix(const std::string& prefix, int64_t* revision = nullptr,
                                            int64_t page = 1000);
  /// One transaction. Throws EtcdError (the transaction may or may not have been applied when the
  /// error is a lost answer; callers write only idempotent puts, or re-read).
  etcdpb::TxnResponse Txn(const etcdpb::TxnRequest& req);
  /// Grants a lease of `ttl_s` seconds; returns its id. Throws EtcdError.
  int64_t LeaseGrant(int64_t ttl_s);
  /// Renews `lease` once; returns the TTL etcd granted (seconds), 0 when the lease no longer
  /// exists. Throws EtcdError when no endpoint answered.
  int64_t LeaseKeepAlive(int64_t lease);
  /// Revokes `lease` (deleting its keys). Throws EtcdError.
  void LeaseRevoke(int64_t lease);

  /// The endpoints, as given.
  const std::vector<std::string>& Endpoints() const { return endpoints_; }
  /// "mutual TLS", "TLS", or "plaintext"; plus ", RBAC user NAME" when logging in.
  std::string SecurityDescription() const;

 private:
  struct Conn;
  /// Runs `call(conn, ctx)` on the current endpoint, moving on to the next one while the answer is
  /// UNAVAILABLE, until the deadline; logs in again once when etcd says the token is invalid.
  /// Returns the last status.
  template <typename F>
  grpc::Status Call(const char* what, F&& call);
  /// Channels to every endpoint with the current credentials. Throws when a TLS file is unreadable.
  std::vector<std::shared_ptr<Conn>> Connect() const;
  /// Rebuilds the channels when a TLS file changed (checked every kCertRefreshSeconds); a file
  /// that cannot be read is logged and the current channels are kept.
  void MaybeReloadTls();
  /// Logs in as security_.user (etcd Authenticate) and keeps the token. Returns the status.
  grpc::Status Login(Conn& c);
  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  EtcdSecurity security_;
  std::string password_;
  std::mutex mu_;
  size_t current_ = 0;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::string token_;           // etcd auth token ("" until logged in)
  std::string tls_stamp_;       // sizes and mtimes of the TLS files the channels were made with
  std::chrono::steady_clock::time_point tls_checked_{};
};

}  // namespace mlsched::server
