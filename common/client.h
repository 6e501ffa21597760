// How clients (CLI tools, agentd) reach schedd: address parsing, channels, per-call credentials.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/server_list.h"
#include "common/tls.h"

namespace mlsched {

/// Default socket path of schedd.
inline constexpr const char* kDefaultSocket = "/run/mlsched/schedd.sock";

/// The address clients use: --server if given, else $MLSCHED_SERVER, else unix:/run/mlsched/schedd.sock.
/// Forms: "unix:/abs/path" (Unix socket, user from SO_PEERCRED) or "HOST:PORT" (TCP: TLS, and the
/// user proven by a MUNGE credential in every call).
std::string ResolveServerAddress(const std::string& flag_value);

/// True for "unix:..." addresses.
bool IsUnixAddress(const std::string& address);

/// ResolveServerAddress(flag_value) split by ParseServerList.
std::string ResolveServerList(const std::string& flag_value, ServerList* out);

/// Trailing metadata key by which a follower names the leader's client address ("HOST:PORT";
/// absent or empty while an election runs).
inline constexpr const char* kLeaderHeader = "x-mlsched-leader";

/// What a finished call's trailing metadata says about the leader.
struct LeaderHint {
  bool present = false;  // kLeaderHeader was sent (the answer came from a follower), even empty
  std::string leader;    // its value: the leader's address, "" when unknown
};

/// Reads kLeaderHeader from the trailing metadata of a finished call `ctx` (values over
/// kMaxServerAddressBytes are ignored).
LeaderHint LeaderHintOf(const grpc::ClientContext& ctx);

/// Metadata key of the per-call MUNGE credential on TCP.
inline constexpr const char* kMungeHeader = "x-mlsched-munge";

/// The payload a call's MUNGE credential binds: "SERVICE/METHOD", e.g.
/// "mlsched.v1.JobService/SubmitJob". schedd accepts a credential only for the call it was made for.
std::string MungePayloadFor(const std::string& service, const std::string& method);

/// A gRPC channel to a user-facing schedd service. Unix socket: plain (the kernel names the
/// caller). TCP: TLS verified against ResolveClientCaFile(), and every call carries a fresh MUNGE
/// credential from the munged at ResolveMungeSocket() (gRPC sends call credentials only over TLS).
/// `private_subchannel`: for a retry after a transient failure (connects at once). Throws
/// std::runtime_error when the CA file cannot be read.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, bool private_subchannel = false);

/// Sets a call's deadline to `timeout_s` seconds from now (0 = none). Credentials are the channel's.
void PrepareContext(grpc::ClientContext& ctx, const std::string& address, int timeout_s = 30);

/// Turns off abseil's mutex deadlock detection in this process (gRPC locks absl::Mutex on every
/// call, read and write). Debian's abseil is built without NDEBUG, so the detection is on and
/// records every lock in a global graph: 11% of schedd's CPU with 10,000 agent streams went to
/// absl GraphCycles::GetId alone (issue 30, perf). Call at the start of main, before any thread.
void DisableMutexDeadlockDetection();

}  // namespace mlsched
