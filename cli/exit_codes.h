// The command-line tools' exit codes (stable; documented in cli/README.md and each --help).
#pragma once

#include <string>

namespace mlsched::cli {

inline constexpr int kExitOk = 0;           // success
inline constexpr int kExitRefused = 1;      // schedd refused or the request failed (bad spec, unknown job, permission)
inline constexpr int kExitUsage = 2;        // usage error: bad flags, bad #MLSUB directive, local validation
inline constexpr int kExitUnreachable = 3;  // schedd unreachable or timed out (gRPC UNAVAILABLE / DEADLINE_EXCEEDED)

/// The exit code for a finished RPC with gRPC status code `grpc_code` (grpc::StatusCode's numeric
/// values: 0 OK, 4 DEADLINE_EXCEEDED, 14 UNAVAILABLE): 0, 3 for unreachable/timed out, else 1.
int ExitCodeForRpc(int grpc_code);

/// Flushes stdout and stderr and ends the process with `code` at once, skipping destructors and
/// atexit handlers: a tool that has printed its answer does not wait for gRPC to tear down its
/// channel and threads (about a third of a one-call tool's run). The kernel closes the sockets.
[[noreturn]] void ExitNow(int code);

/// True when a submission whose call ended with `grpc_code` may still have been stored: schedd was
/// slow or unreachable (4 DEADLINE_EXCEEDED, 14 UNAVAILABLE), so a try may have reached it and
/// been stored after its answer was lost. Any other failure is schedd's answer: nothing stored.
bool IsUnconfirmed(int grpc_code);
/// What mlsub tells the user then: the submission key, and that the same mlsub run again with
/// `--submission-key KEY` answers with the stored job, or stores it once.
std::string UnconfirmedSubmissionHelp(const std::string& submission_key);

/// What an interactive tool (mlalloc, mlrun) tells its user when its allocation's submission is
/// unconfirmed: to run it again with `--submission-key KEY` (schedd answers with the stored
/// allocation, which the tool then binds to), and that schedd cancels an interactive job no client
/// watches (AllocationWatch) after its grace, so nothing stays allocated unseen.
std::string UnconfirmedAllocationHelp(const std::string& tool, const std::string& submission_key);

/// The "Exit codes:" paragraph shown at the end of every tool's --help.
std::string ExitCodesHelp();

}  // namespace mlsched::cli
