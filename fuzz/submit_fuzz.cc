// Fuzz target: mlsub's option grammar (cli/submit_options.h). The input is a batch script: its
// #MLSUB directives go through ParseDirectives; its first line is also split like a directive and
// parsed as a command line (ParseSubmitArgs). Option values reach the units, --dependency and
// --array parsers. Properties: no crash or UB, no exception; values from directives carry their
// "job.sh:LINE" origin.
#include "cli/submit_options.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string script = mlsched::fuzz::Text(data, size);
  auto directives = mlsched::cli::ParseDirectives(script, "job.sh");
  FUZZ_CHECK(directives.value.has_value() != !directives.error.empty());
  if (directives) {
    for (const auto& [option, origin] : directives.value->options.origin) FUZZ_CHECK(origin.rfind("job.sh:", 0) == 0);
  }
  auto words = mlsched::cli::SplitDirectiveWords(script.substr(0, script.find('\n')));
  if (!words) return 0;
  auto args = mlsched::cli::ParseSubmitArgs(*words.value);
  FUZZ_CHECK(args.value.has_value() != !args.error.empty());
  if (args && directives) mlsched::cli::OverlayOptions(directives.value->options, args.value->options);
  return 0;
}
