// mlsub's options: one table drives the command-line parser, the #MLSUB directive parser and
// --help, so a directive accepts exactly the options (and value syntax) of the command line.
// No CLI11 here: sbatch's grammar (options stop at the script name, directives carry file:line
// errors) is parsed by this table-driven parser, which the unit tests exercise directly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/container_ref.h"
#include "common/units.h"

namespace mlsched::cli {

/// Everything mlsub can be told, from the command line or from #MLSUB directives. A field is set
/// only when an option named it, so command-line values can be laid over directive values.
/// Units: CPU in millicores, memory in bytes, times in seconds.
/// Longest submission key schedd accepts (Controller::Submit: letters, digits, '-', '_', '.').
constexpr size_t kMaxSubmissionKeyChars = 64;

struct SubmitOptions {
  std::optional<std::string> job_name;           // -J/--job-name
  std::optional<int64_t> ntasks;                 // -n/--ntasks (gang size; an elastic gang's MAX)
  /// -n MIN-MAX[:STEP]: an elastic gang's smallest size and step (tasks); unset = rigid. Set and
  /// cleared together with ntasks.
  std::optional<std::pair<int64_t, int64_t>> task_range;
  std::optional<int64_t> cpu_millis_per_task;    // -c/--cpus-per-task, fractional allowed
  std::optional<int64_t> memory_bytes_per_task;  // --mem-per-task (bare number = MB)
  std::optional<int64_t> gpus_per_task;          // --gpus-per-task
  std::optional<std::vector<std::string>> gpu_types;  // --gpu-types, preferred first
  std::optional<std::vector<std::pair<std::string, int64_t>>> fallback;  // --fallback TYPE@WAIT,... (seconds)
  std::optional<int64_t> time_limit_s;           // -t/--time
  std::optional<std::string> partition;          // -p/--partition
  std::optional<std::string> account;            // -A/--account
  std::optional<std::string> qos;                // --qos
  std::optional<std::string> output;             // -o/--output pattern
  std::optional<std::string> error;              // -e/--error pattern
  std::optional<std::string> chdir;              // -D/--chdir
  std::optional<std::string> export_env;         // --export, resolved by ResolveExport
  std::optional<bool> hold;                      // -H/--hold
  std::optional<std::string> topology;           // --topology
  std::optional<int64_t> nice;                   // --nice
  std::optional<std::string> dependency;         // -d/--dependency, sbatch syntax (checked)
  std::optional<std::string> array;              // -a/--array, e.g. 0-99%10 (checked)
  std::optional<std::string> spot;               // --spot never|allow|prefer
  std::optional<int64_t> checkpoint_interval_s;  // --checkpoint-interval
  std::optional<std::string> data_region;        // --data-region
  std::optional<int64_t> data_bytes;             // --data-size
  std::optional<bool> region_strict;             // --region-strict
  // pyxis's container options (common/container_ref.h checks them):
  std::optional<std::string> container_image;    // --container-image, canonical (ImageRef::Canonical)
  std::optional<std::vector<ContainerMountSpec>> container_mounts;  // --container-mounts SRC[:DST[:ro|rw]],...
  std::optional<std::string> container_workdir;  // --container-workdir
  std::optional<std::vector<std::string>> container_env;  // --container-env NAME,...
  std::optional<bool> container_writable;        // --container-writable
  std::optional<std::string> container_auth_file;  // --container-auth-file
  std::optional<bool> container_mount_home;      // --container-mount-home (true), --no-container-mount-home (false)
  std::optional<std::string> wrap;               // --wrap (command line only)
  std::optional<std::string> server;             // --server (command line only)
  /// --submission-key (command line only): the key of an earlier mlsub whose outcome was not
  /// confirmed; schedd answers with that job instead of storing a second one.
  std::optional<std::string> submission_key;
  bool parsable = false;                         // --parsable (command line only)
  bool help = false;                             // -h/--help (command line only)
  /// Canonical long option name ("ntasks") -> "job.sh:3" for values that came from a directive,
  /// so later validation errors can point at the line.
  std::map<std::string, std::string> origin;
};

/// One mlsub option. `apply` parses the value into the options and returns "" or an error detail
/// (e.g. "'abc' is not an integer").
struct SubmitOptionDef {
  char short_name = 0;                    // 0 when the option has no short form
  std::vector<std::string> long_names;    // first is canonical, without the leading "--"
  std::string value_name;                 // empty for flags
  bool in_directives = true;              // allowed in #MLSUB lines
  std::string help;
  std::function<std::string(SubmitOptions&, const std::string&)> apply;
};

/// The table of mlsub's options, in --help order.
const std::vector<SubmitOptionDef>& SubmitOptionTable();

/// The result of parsing mlsub's command line.
struct SubmitArgs {
  SubmitOptions options;
  /// The script path and the arguments after it (option parsing stops at the script, like sbatch).
  std::vector<std::string> positionals;
  /// The command after "--" (spec.argv); `has_command` tells "--" was given at all.
  std::vector<std::string> command;
  bool has_command = false;
};

/// Parses mlsub's arguments (without argv[0]). Accepts "-J name", "-Jname", "--job-name name" and
/// "--job-name=name". Errors: "unknown option '--x'", "option --ntasks needs a value",
/// "--ntasks: 'x' is not an integer", "option --hold takes no value".
Parsed<SubmitArgs> ParseSubmitArgs(const std::vector<std::string>& args);

/// Options found in a script's #MLSUB lines, and warnings about ignored ones.
struct DirectiveResult {
  SubmitOptions options;
  std::vector<std::string> warnings;  // e.g. "job.sh:9: #MLSUB directive after the first command is ignored"
};

/// Parses the #MLSUB directives of a batch script, as sbatch reads #SBATCH: only in the leading
/// block of comment and blank lines after the "#!" line; the first other line ends the block and
/// later directives are ignored with a warning. A directive line is "#MLSUB" then options split like
/// a shell would (single/double quotes, backslash escapes); a word starting with '#' starts a
/// comment. Errors name the script and line: "job.sh:3: unknown option '--gpus-per-tsk' in
/// #MLSUB directive". `script_name` is the name used in messages.
Parsed<DirectiveResult> ParseDirectives(const std::string& script, const std::string& script_name);

/// Lays `top` over `base`: every option set in `top` replaces base's value (and origin). Used to
/// make command-line options override directives.
void OverlayOptions(SubmitOptions& base, const SubmitOptions& top);

/// mlsub's option help (one line per option), generated from the table.
std::string SubmitOptionsHelp();

/// Splits a directive's text into words like a POSIX shell: whitespace separates words, quotes
/// group, backslash escapes; an unquoted word starting with '#' ends the line. Error on an
/// unterminated quote: "unterminated \" quote".
Parsed<std::vector<std::string>> SplitDirectiveWords(const std::string& text);

}  // namespace mlsched::cli
