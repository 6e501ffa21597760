// Lists of schedd replicas (high availability): parsing and checking, free of gRPC so the CLI's
// pure code can use it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace mlsched {

/// Most schedd replicas one --server / $MLSCHED_SERVER list may name.
inline constexpr size_t kMaxServers = 16;
/// Longest single address of a list, in bytes (a unix: path is at most 108 bytes anyway).
inline constexpr size_t kMaxServerAddressBytes = 256;

/// The schedd replicas a client may talk to, in the order given. High availability: several
/// replicas run, one of them (the leader) serves; the others answer with UNAVAILABLE and name the
/// leader in the trailing metadata x-mlsched-leader (kLeaderHeader, common/client.h).
struct ServerList {
  std::vector<std::string> addresses;  // "unix:/abs/path" or "HOST:PORT"; never empty once parsed
  /// Index of `address` in the list (exact match), or -1.
  int IndexOf(const std::string& address) const;
  /// "a, b, c" for messages.
  std::string Joined() const;
};

/// Parses a comma-separated list of addresses: "HOST:PORT,HOST:PORT,..." (TCP replicas, each with
/// a non-empty host and a port 1-65535) or a single "unix:/abs/path". Blanks around entries are
/// dropped. Errors (`*out` is then left untouched): empty entries, more than
/// kMaxServers entries, an entry over kMaxServerAddressBytes, duplicates, a unix: entry in a list
/// of several (a Unix socket reaches one local replica; mixing it with TCP replicas is refused).
/// Returns "" on success, else the error, e.g. "server list 'a:1,unix:/s': unix:/s ...".
std::string ParseServerList(const std::string& text, ServerList* out);

}  // namespace mlsched
