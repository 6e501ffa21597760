// Plain stderr logging for mltrain, each line prefixed with a UTC timestamp and the rank.
#pragma once

#include <stdexcept>
#include <string>

namespace mltrain {

/// Process exit codes understood by agentd and the scheduler.
/// Requeue me (EX_TEMPFAIL; schedd requeues the job, keeping its queue position): stopped on
/// SIGTERM after a committed checkpoint, or rank 0 found MASTER_PORT taken by another process.
inline constexpr int kExitPreempted = 75;
inline constexpr int kExitPeerLost = 76;   ///< a peer did not arrive or died; the gang must be restarted

/// Raised when a rank does not arrive at the rendezvous in time, a collective times out, or a
/// peer's connection breaks. main() turns it into exit code kExitPeerLost.
class PeerLostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Sets the rank shown in every log line (-1 hides it).
void SetLogRank(int rank);
/// Writes "2026-01-01T00:00:00Z [rank R] LEVEL message" to stderr (one write, so lines of
/// concurrent ranks do not interleave).
void LogInfo(const std::string& message);
void LogWarn(const std::string& message);
void LogError(const std::string& message);

}  // namespace mltrain
