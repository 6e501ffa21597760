// Limits and checks of interactive sessions (proto/mlsched/v1/session.proto), shared by schedd,
// which checks what a client sends before anything reaches a node, and agentd, which checks again
// what arrives from schedd before a root process acts on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mlsched/v1/session.pb.h"

namespace mlsched {

/// Bytes of one data message (input or output); larger input is refused, output is cut to it.
inline constexpr size_t kMaxSessionChunk = 64 * 1024;
/// argv entries, and their bytes in all.
inline constexpr size_t kMaxSessionArgs = 1024;
inline constexpr size_t kMaxSessionArgvBytes = 128 * 1024;
/// A terminal's rows and columns (TIOCSWINSZ holds 16 bits each).
inline constexpr uint32_t kMaxWindowCells = 10000;
/// How SessionExit.error starts when the session broke (a stream ended) before its process did.
inline constexpr const char* kSessionLostPrefix = "session lost: ";
/// Variables a session's open may set over the task's environment.
inline constexpr size_t kMaxSessionEnv = 256;
/// TERM's length.
inline constexpr size_t kMaxTermBytes = 64;
/// Tasks of one step (JobService.StartStep ntasks; SessionOpen.step_task below it).
inline constexpr int32_t kMaxStepTasks = 100000;
/// Steps one job may start (srun counts to 4,294,967,292; a job that starts steps in a loop is
/// stopped here instead of filling the store).
inline constexpr int32_t kMaxStepsPerJob = 100000;
/// Bytes of a step's name (its command's first word, base name).
inline constexpr size_t kMaxStepNameBytes = 128;

/// Why `open` is refused ("" when it is fine): job id > 0, rank >= 0, argv of 1..kMaxSessionArgs
/// entries of kMaxSessionArgvBytes in all with no NUL byte and a non-empty argv[0], a window of
/// 1..kMaxWindowCells each when given, TERM of letters, digits, '-', '.', '+' and '_' only, and at
/// most kMaxSessionEnv NAME=VALUE variables (names [A-Za-z_][A-Za-z0-9_]*, no NUL byte) of
/// kMaxSessionArgvBytes in all, and a step id and task in 0..kMaxStepsPerJob, 0..kMaxStepTasks.
std::string CheckSessionOpen(const v1::SessionOpen& open);

/// Why a message after the open is refused ("" when fine): another open, data over
/// kMaxSessionChunk, a window out of range, a signal not in the list SessionInput names.
std::string CheckSessionInput(const v1::SessionInput& in);

/// Whether `signal` may be sent to a session's processes (SessionInput.signal).
bool SessionSignalAllowed(int32_t signal);

}  // namespace mlsched
