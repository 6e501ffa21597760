// Quantities users type (common/units.h): the edge cases the fuzz targets found (fuzz/units_fuzz.cc).
#include <catch2/catch.hpp>

#include <ctime>

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

TEST_CASE("points in time for mlq --since: now, ages, local dates and Unix seconds", "[cli][units]") {
  const int64_t now = 1'800'000'000;
  auto at = [&](const std::string& text) {
    auto t = ParseTimePoint(text, now);
    INFO(text << ": " << t.error);
    REQUIRE(t);
    return *t.value;
  };
  CHECK(at("now") == now);
  CHECK(at("-2d") == now - 2 * 86400);
  CHECK(at("now-2days") == now - 2 * 86400);
  CHECK(at("now-36h") == now - 36 * 3600);
  CHECK(at("-1week") == now - 7 * 86400);
  CHECK(at("-90min") == now - 90 * 60);
  CHECK(at("-30s") == now - 30);
  CHECK(at("-1-12:00:00") == now - 36 * 3600);  // D-H:M:S, as time limits are written
  CHECK(at("@1700000000") == 1'700'000'000);
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 10;
  tm.tm_mday = 1;
  tm.tm_isdst = -1;
  const int64_t midnight = std::mktime(&tm);
  CHECK(at("2026-11-01") == midnight);
  CHECK(at("2026-11-01T12:00") == midnight + 12 * 3600);
  CHECK(at("2026-11-01T12:00:30") == midnight + 12 * 3600 + 30);
}

TEST_CASE("malformed points in time are errors that name the text", "[cli][units]") {
  for (const char* text : {"", "yesterday", "-", "now-", "-2x", "-2 d", "now+2d", "--2d", "2026-11", "2026-13-01",
                           "2026-02-30", "2026-11-01T25:00", "2026-11-01T12", "2026-11-01 12:00", "26-11-01",
                           "2026-11-01T12:00:00Z", "@", "@-5", "@12x", "-99999999999999999999d", "-0d", "-unlimited"}) {
    auto t = ParseTimePoint(text, 1'800'000'000);
    INFO(text);
    CHECK_FALSE(t);
    CHECK_THAT(t.error, Catch::Contains("'" + std::string(text) + "'"));
  }
  CHECK_THAT(ParseTimePoint("-2000000d", 1'800'000'000).error, Catch::Contains("too long"));
}
