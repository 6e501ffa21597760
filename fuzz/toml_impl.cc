// toml++'s implementation, compiled once into the fuzz build with the fuzzer's instrumentation (the
// policy sources include toml++ with TOML_HEADER_ONLY=0), so that coverage guides the fuzzer
// through the TOML grammar too.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
