// Fuzz target: agentd's spot eviction-notice parsers (agentd/eviction.h), fed by a cloud metadata
// endpoint over plain HTTP; agentd runs as root. The first byte picks the HTTP status (mostly 200);
// the rest is the body. Properties: no crash or UB, no exception; a notice comes only from a 200
// answer; an unrecognized body sets the problem text.
#include <cctype>

#include "agentd/eviction.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const long statuses[] = {200, 200, 200, 200, 404, 401, 500, 0};
  const long status = statuses[data[0] % 8];
  const std::string body = mlsched::fuzz::Text(data + 1, size - 1);
  std::string problem;
  const int64_t now = 1'800'000'000;
  auto notice = mlsched::agent::ParseEvictionResponse(status, body, now, &problem);
  if (notice) {
    FUZZ_CHECK(status == 200);
    FUZZ_CHECK(notice->source == "aws-instance-action" || notice->source == "gcp-preempted");
  } else if (status != 404 && problem.empty()) {  // only "no notice" answers may be silent
    std::string upper = mlsched::agent::TrimBlanks(body);
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    FUZZ_CHECK(status == 200 && upper == "FALSE");
  }
  (void)mlsched::agent::ParseUtcTimestamp(body);
  return 0;
}
