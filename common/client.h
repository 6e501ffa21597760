// How clients (CLI tools, agentd) reach schedd: address parsing, channels, per-call credentials.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace mlsched {

/// Default socket path of schedd.
inline constexpr const char* kDefaultSocket = "/run/mlsched/schedd.sock";

/// The address clients use: --server if given, else $MLSCHED_SERVER, else unix:/run/mlsched/schedd.sock.
/// Forms: "unix:/abs/path" (Unix socket, user from SO_PEERCRED) or "HOST:PORT" (TCP, token needed).
std::string ResolveServerAddress(const std::string& flag_value);

/// True for "unix:..." addresses.
bool IsUnixAddress(const std::string& address);

/// A gRPC channel to schedd (insecure transport; TCP calls carry the shared token as metadata).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

/// Adds the credentials of a call: on TCP, "x-mlsched-token" from $MLSCHED_TOKEN or the file named
/// by $MLSCHED_TOKEN_FILE, and "x-mlsched-user" (the caller's login name). Sets a deadline of
/// `timeout_s` seconds (0 = none).
void PrepareContext(grpc::ClientContext& ctx, const std::string& address, int timeout_s = 30);

/// Metadata keys.
inline constexpr const char* kTokenHeader = "x-mlsched-token";
inline constexpr const char* kUserHeader = "x-mlsched-user";

/// Reads the shared token: $MLSCHED_TOKEN, else the contents of $MLSCHED_TOKEN_FILE (trimmed), else "".
std::string ReadTokenFromEnv();

}  // namespace mlsched
