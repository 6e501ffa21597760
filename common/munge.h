// User identity across hosts with MUNGE (the credential service Slurm uses): a client asks its
// local munged to encode a credential that carries its kernel uid/gid; schedd asks its munged to
// decode it. munged rejects expired credentials (TTL) and replays (each credential decodes once).
#pragma once

#include <cstdint>
#include <string>

namespace mlsched {

/// Default socket of the system munged (Debian's munge package).
inline constexpr const char* kDefaultMungeSocket = "/run/munge/munge.socket.2";
/// Longest credential accepted for decoding (bytes). A credential for a short payload is ~150 B.
inline constexpr size_t kMaxMungeCredentialBytes = 4096;
/// Longest payload bound into a credential (bytes); mlsched binds the RPC method name.
inline constexpr size_t kMaxMungePayloadBytes = 256;

/// The MUNGE socket clients and schedd use: `flag` if set, else $MLSCHED_MUNGE_SOCKET, else the default.
std::string ResolveMungeSocket(const std::string& flag = "");

/// What a decoded credential proved: the uid/gid of the process that encoded it and the payload.
struct MungeIdentity {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string payload;
};

/// Outcome of encoding or decoding. `code` is the munge_err_t value (0 = success); `message` says
/// what failed in words a user can act on (munged not running, expired, replayed, key mismatch).
struct MungeResult {
  int code = 0;
  std::string message;
  bool ok() const { return code == 0; }
};

/// Encodes a credential for the calling process binding `payload` (<= kMaxMungePayloadBytes),
/// valid for `ttl_s` seconds (0 = munged's default, 300 s), through munged at `socket`.
MungeResult MungeEncode(const std::string& socket, const std::string& payload, int ttl_s, std::string* credential);

/// Decodes `credential` through munged at `socket`. Fails on an over-long credential, a credential
/// made with another key (EMUNGE_CRED_INVALID), an expired (EMUNGE_CRED_EXPIRED) or replayed
/// (EMUNGE_CRED_REPLAYED) one, and when munged cannot be reached (EMUNGE_SOCKET).
MungeResult MungeDecode(const std::string& socket, const std::string& credential, MungeIdentity* out);

}  // namespace mlsched
