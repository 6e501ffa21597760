// Following the schedd leader across a list of replicas (high availability). Free of gRPC: the
// caller runs the calls (cli/rpc.cc) and this decides where the next one goes.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cli/rpc.h"

namespace mlsched::cli {

/// gRPC status codes used here (numeric, as in RpcStatus).
inline constexpr int kCodeDeadlineExceeded = 4;
inline constexpr int kCodeUnavailable = 14;

/// What one call to one replica gave.
struct HopResult {
  RpcStatus status;
  bool follower = false;    // the answer named itself a follower (x-mlsched-leader present): nothing was done
  std::string leader_hint;  // the leader it named ("" while an election runs)
  bool unsent = false;      // the call never left this client (no connection): nothing was done
};

/// How one logical try over the list went.
struct FailoverResult {
  RpcStatus status;                // the last call's answer
  std::vector<std::string> tried;  // every address called, in order (repeats removed)
  bool ambiguous = false;          // a failed call may have been acted upon (answer lost, timeout)
};

/// One try of a call against the replicas `servers` (not empty), starting at `*current`:
///  - an answer other than UNAVAILABLE ends the try (OK or not);
///  - UNAVAILABLE with a leader hint that names another member not found dead in this try: that
///    member is called at once (no backoff); a hint outside the list is ignored;
///  - any other UNAVAILABLE: the next member not yet tried is called;
///  - the try ends when every member was tried, or after servers.size() + 1 calls.
/// With `only_safe_hops` (signals: never delivered twice), it hops only after answers where
/// nothing was done (follower answers, calls never sent); any other failure ends the try.
/// DEADLINE_EXCEEDED ends the try and moves `*current` on (a stopped replica keeps timing out;
/// the caller's retry then starts at the next member). `*current` is left at the member that
/// answered, or the one to try first next time.
FailoverResult CallWithFailover(const std::vector<std::string>& servers, size_t* current,
                                const std::function<HopResult(size_t index)>& call, bool only_safe_hops = false);

}  // namespace mlsched::cli
