// A small synchronous client of etcd's v3 API (KV, Lease) for schedd's HA mode, over the gRPC
// stubs generated from Debian's golang-etcd-server-dev protos. It fails over between the cluster's
// endpoints: a call that finds its endpoint unreachable tries the next one, until the call's
// deadline. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

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

class EtcdClient {
 public:
  /// `endpoints`: HOST:PORT of etcd members (plain gRPC; loopback or a private network).
  /// `timeout`: deadline of one call, over all the endpoints it tries.
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout);
  ~EtcdClient();

  /// One Range call (linearizable read). Throws EtcdError.
  etcdpb::RangeResponse Range(const etcdpb::RangeRequest& req);
  /// Every key under `prefix`, read in pages of `page` keys at one revision (a consistent
  /// snapshot): `*revision` when it is given and > 0 (read serializable at it), else the newest
  /// (a linearizable first page), which `*revision` then gets. Throws EtcdError.
  std::vector<mvccpb::KeyValue> RangePrefix(const std::string& prefix, int64_t* revision = nullptr,
                                            int64_t page = 10000);
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

 private:
  struct Conn;
  /// Runs `call(conn, ctx)` on the current endpoint, moving on to the next one while the answer is
  /// UNAVAILABLE, until the deadline. Returns the last status.
  template <typename F>
  grpc::Status Call(const char* what, F&& call);
  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  size_t current_ = 0;
  std::vector<std::shared_ptr<Conn>> conns_;
};

}  // namespace mlsched::server
