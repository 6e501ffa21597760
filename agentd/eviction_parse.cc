// The eviction-notice parsers, apart from the curl poller so that they can be tested and fuzzed
// without a network: the metadata bodies come from an HTTP endpoint the agent (root) trusts only
// as far as these checks go.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "agentd/eviction.h"

namespace mlsched::agent {

std::string TrimBlanks(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::optional<int64_t> ParseUtcTimestamp(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6)
    return std::nullopt;
  std::string rest = text.substr(static_cast<size_t>(consumed));
  if (!rest.empty() && rest[0] == '.') {
    size_t i = 1;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) ++i;
    rest = rest.substr(i);
  }
  if (rest != "Z" && rest != "+00:00" && rest != "") return std::nullopt;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm));
}

std::optional<EvictionNoticeInfo> ParseEvictionResponse(long http_status, const std::string& body, int64_t now,
                                                        std::string* problem) {
  if (http_status == 404) return std::nullopt;
  if (http_status != 200) {
    *problem = "metadata endpoint answered HTTP " + std::to_string(http_status);
    return std::nullopt;
  }
  std::string text = TrimBlanks(body);
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  if (upper == "FALSE") return std::nullopt;
  if (upper == "TRUE") return EvictionNoticeInfo{now + kGcpNoticeSeconds, "gcp-preempted"};
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("action") && json["action"].is_string()) {
    std::string action = json["action"].get<std::string>();
    auto deadline = json.contains("time") && json["time"].is_string()
                        ? ParseUtcTimestamp(json["time"].get<std::string>())
                        : std::optional<int64_t>(now);
    if (!deadline) {
      *problem = "instance-action has an unreadable time: " + text;
      return std::nullopt;
    }
    return EvictionNoticeInfo{*deadline, "aws-instance-action"};
  }
  *problem = "unrecognized eviction metadata body: '" + text.substr(0, 200) + "'";
  return std::nullopt;
}

}  // namespace mlsched::agent
