// Turning mlsub's options and payload into a validated JobSpec: --export resolution, the script /
// --wrap / "-- CMD" payload, defaults, and local validation before anything reaches schedd.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/submit_options.h"
#include "common/units.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// Environment variables by name.
using Environment = std::map<std::string, std::string>;

/// The environment of this process (from `envp`, e.g. `environ`).
Environment EnvironmentFrom(char** envp);

/// Resolves an --export value with Slurm's semantics against the submitting environment `env`:
///  - "ALL" (also an empty value): every variable of `env`;
///  - "NONE": nothing (the agent then supplies PATH, USER, HOME);
///  - "ALL,VAR=val,...": every variable, plus/overridden by the assignments;
///  - "VAR,VAR2=val,..." (optionally led by "NONE,"): only the named variables that `env` has, and
///    the assignments.
/// Items are split at commas; an item that is not a variable name or assignment continues the
/// previous assignment's value ("CUDA_VISIBLE_DEVICES=0,1"). MLSCHED_TOKEN is never exported (the
/// shared secret must not be stored with the job). Error: "bad --export item '1X': not a variable name".
Parsed<Environment> ResolveExport(const std::string& value, const Environment& env);

/// What the tasks run: a batch script (contents), --wrap CMD, or "-- CMD ARGS".
struct SubmitPayload {
  enum class Kind { kScript, kWrap, kCommand };
  Kind kind = Kind::kScript;
  std::string script;               // kScript: the file's contents; kWrap: the command line
  std::string script_name;          // kScript: path as given (messages, default job name) or "stdin"
  std::vector<std::string> argv;    // kCommand
};

/// The submitter's side of a submission: current directory (absolute) and environment.
struct SubmitContext {
  std::string cwd;
  Environment env;
  std::optional<uint32_t> umask;  // the submitter's umask (sent so tasks create files as it would)
};

/// Local validation limits (absurd sizes are refused before reaching schedd; schedd checks
/// feasibility against the real nodes). Values mirror schedd's own limits where it has them.
inline constexpr int64_t kMaxTasks = 100000;
inline constexpr int64_t kMaxCpuMillisPerTask = 4096 * 1000;      // 4096 cores
inline constexpr int64_t kMaxMemoryBytesPerTask = int64_t{64} << 40;  // 64 TiB
inline constexpr int64_t kMaxGpusPerTask = 1024;
inline constexpr int64_t kMaxTimeLimitS = 365 * 86400;
inline constexpr int64_t kMaxNice = 2147483645;  // Slurm's bound on --nice

/// Builds the JobSpec from merged options and the payload, applying defaults (ntasks 1, 1 CPU,
/// working directory = cwd, --export=ALL, job name from the script/command) and checking every
/// value. Errors name the option and, for directive values, the line:
/// "--ntasks must be >= 1 (got 0)", "job.sh:2: --gpus-per-task must be >= 0 (got -1)".
Parsed<v1::JobSpec> BuildJobSpec(const SubmitOptions& opts, const SubmitPayload& payload, const SubmitContext& ctx);

/// A prepared submission: the spec to send and what mlsub should print.
struct Submission {
  v1::JobSpec spec;
  SubmitOptions options;              // command line laid over directives
  std::vector<std::string> warnings;  // from directive parsing
};

/// Reads a script file: its contents, or an error such as "cannot read script 'x.sh': No such file".
using ReadFileFn = std::function<Parsed<std::string>(const std::string& path)>;

/// The whole of mlsub before the RPC: picks the payload (script file, stdin when there is neither
/// a script nor a command, --wrap, or "-- CMD"), parses directives of a script, lays the command
/// line over them and builds the spec. All errors are usage errors (exit 2).
Parsed<Submission> PrepareSubmission(const SubmitArgs& args, const SubmitContext& ctx, const ReadFileFn& read_file,
                                     const std::function<std::string()>& read_stdin);

}  // namespace mlsched::cli
