// Quantities users type (common/units.h): the edge cases the fuzz targets found (fuzz/units_fuzz.cc).
#include <catch2/catch.hpp>

#include "common/units.h"

using namespace mlsched;

TEST_CASE("time limits too large for 64-bit seconds are errors, not overflows", "[cli][units][fuzz]") {
  // Each of these multiplied an 18-digit number into a signed overflow (UB) before the fix.
  for (const char* text : {"401021020102000100", "777777777777777710m", "999999999999999999d", "999999999999999999h",
                           "999999999999999999-0", "1-999999999999999999:00:00", "0:999999999999999999:0"}) {
    auto d = ParseDuration(text);
    CHECK_FALSE(d);
    CHECK_THAT(d.error, Catch::Contains(text));
  }
  auto big = ParseDuration(std::to_string(kMaxDurationSeconds / 60 + 1));
  CHECK_THAT(big.error, Catch::Contains("too long"));
  CHECK(*ParseDuration(std::to_string(kMaxDurationSeconds) + "s").value == kMaxDurationSeconds);
  CHECK(*ParseDuration("2-00:00:00").value == 2 * 86400);
  CHECK(*ParseDuration("36500d").value == int64_t{36500} * 86400);
}

TEST_CASE("CPU counts that are not finite numbers are errors", "[cli][units][fuzz]") {
  for (const char* text : {"nan", "NaN", "inf", "-inf", "infinity", "1e400"}) CHECK_FALSE(ParseCpus(text));
  CHECK(*ParseCpus("0.5").value == 500);
}
