// Parsing and formatting of Slurm-style quantities: memory sizes, CPU counts and time limits.
// Pure functions; errors are returned as messages that name the offending text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlsched {

/// A parse result: a value, or an error message such as "bad memory size '4X': unknown unit 'X'".
template <typename T>
struct Parsed {
  std::optional<T> value;
  std::string error;
  explicit operator bool() const { return value.has_value(); }
};

/// Memory size to bytes. Slurm's convention: a bare number is megabytes; suffixes K, M, G, T
/// (powers of 1024, optional trailing 'B' or 'iB'), case-insensitive. "4G" -> 4294967296.
Parsed<int64_t> ParseMemory(const std::string& text);

/// CPU count to millicores: "2" -> 2000, "0.5" -> 500, "1500m" -> 1500.
Parsed<int64_t> ParseCpus(const std::string& text);

/// Longest duration ParseDuration accepts: 1,000 years. Larger values (and components that would
/// overflow 64-bit seconds) are errors; job time limits are capped far lower when validated.
inline constexpr int64_t kMaxDurationSeconds = int64_t{1000} * 365 * 86400;

/// Time limit to seconds. Slurm's formats: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S";
/// also "90s", "30m", "4h", "2d". "UNLIMITED"/"infinite" gives 0 (meaning: the partition maximum).
/// Over kMaxDurationSeconds is an error ("time limit '...' is too long").
Parsed<int64_t> ParseDuration(const std::string& text);

/// A point in time as the tools accept it (mlq --since), in Unix seconds:
/// * "now";
/// * an age before `now`: "-AGE" or "now-AGE", AGE a count with a unit (s, sec, second(s), m, min,
///   minute(s), h, hour(s), d, day(s), w, week(s): "-2d", "now-36hours", "-1week") or a time as
///   time limits are written ("-1-12:00:00", "-90:00"); more than kMaxDurationSeconds is "too long";
/// * a local date and time: "YYYY-MM-DD" (midnight), "YYYY-MM-DDTHH:MM", "YYYY-MM-DDTHH:MM:SS";
///   days, hours and minutes out of range (2026-02-30, T25:00) are errors;
/// * "@SECONDS": Unix time.
/// An age further back than `now` gives a negative time (before 1970).
/// Errors name the text: "bad time '-2x': expected now, -AGE (...), YYYY-MM-DD[THH:MM[:SS]] or @SECONDS".
Parsed<int64_t> ParseTimePoint(const std::string& text, int64_t now);

/// Seconds as squeue prints them: "M:SS", "H:MM:SS" or "D-HH:MM:SS".
std::string FormatDuration(int64_t seconds);

/// Bytes as a short human string: "512M", "4G", "1.5T".
std::string FormatBytes(int64_t bytes);

/// Unix time as "YYYY-MM-DDTHH:MM:SS" in local time, or "N/A" for 0.
std::string FormatTimestamp(int64_t unix_seconds);

/// Most names one range of a hostlist may expand to (plus one: "[0-100000]" is accepted).
inline constexpr int64_t kMaxHostlistRange = 100000;
/// Most names a whole hostlist may expand to; more is an error (a few KB of "[0-99999,0-99999,...]"
/// would otherwise ask for tens of millions of strings).
inline constexpr size_t kMaxHostlistNames = 1000000;
/// Most bytes of names a whole hostlist may expand to (a long prefix repeated a million times).
inline constexpr size_t kMaxHostlistBytes = size_t{16} << 20;

/// Expands a Slurm hostlist like "gpu-[01-03,07]" into gpu-01, gpu-02, gpu-03, gpu-07. Errors:
/// a missing ']', a bad range, more than kMaxHostlistNames names or kMaxHostlistBytes of them.
Parsed<std::vector<std::string>> ExpandHostlist(const std::string& text);

}  // namespace mlsched
