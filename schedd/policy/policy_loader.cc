#include "schedd/policy/policy_loader.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

std::string PolicyError::ToString() const {
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

std::string PolicyLoadResult::ErrorText() const {
  std::string out;
  for (const PolicyError& e : errors) out += e.ToString() + "\n";
  return out;
}

std::optional<core::Duration> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text.find(':') != std::string_view::npos) {  // Slurm: [D-]HH:MM:SS or MM:SS
    int64_t days = 0;
    size_t dash = text.find('-');
    std::string_view clock = text;
    if (dash != std::string_view::npos) {
      auto d = ParseDuration(text.substr(0, dash));
      if (!d || text.substr(0, dash).find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
      days = *d;
      clock = text.substr(dash + 1);
    }
    std::vector<int64_t> parts;
    size_t pos = 0;
    while (pos <= clock.size()) {
      size_t colon = clock.find(':', pos);
      std::string_view part = clock.substr(pos, colon == std::string_view::npos ? clock.npos : colon - pos);
      if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
      parts.push_back(std::stoll(std::string(part)));
      if (colon == std::string_view::npos) break;
      pos = colon + 1;
    }
    // days <= kMaxDuration (checked by the recursive call) and parts < 10^9: no overflow.
    core::Duration total = 0;
    if (parts.size() == 2) total = days * 86400 + parts[0] * 60 + parts[1];
    else if (parts.size() == 3) total = days * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2];
    else return std::nullopt;
    if (total > kMaxDuration) return std::nullopt;
    return total;
  }
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    if (i == start || i - start > 12) return std::nullopt;
    int64_t n = std::stoll(std::string(text.substr(start, i - start)));
    int64_t unit = 1;
    if (i < text.size()) {
      switch (text[i]) {
        case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        case 'd': unit = 86400; break;
        case 'w': unit = 7 * 86400; break;
        default: return std::nullopt;
      }
      ++i;
    } else if (start != 0) {
      return std::nullopt;  // "1h30": a bare number only alone
    }
    // n < 10^12 and unit <= 604800, so n * unit < 2^63; total stays <= kMaxDuration.
    if (n * unit > kMaxDuration - total) return std::nullopt;
    total += n * unit;
  }
  return total;
}

PolicyLoadResult ParsePolicy(std::string_view text, const std::string& source_name) {
  PolicyLoadResult result;
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    result.errors.push_back({source_name, static_cast<int>(e.source().begin.line),
                             static_cast<int>(e.source().begin.column), std::string(e.description())});
    return result;
  }
  PolicyReader reader(source_name);
  core::PolicySet policy = reader.Read(root);
  if (reader.errors().empty()) {
    result.policy = std::move(policy);
    result.simulation = reader.simulation();
  } else {
    result.errors = reader.errors();
  }
  return result;
}

PolicyLoadResult LoadPolicyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    PolicyLoadResult r;
    r.errors.push_back({path, 0, 0, "cannot read the policy file"});
    return r;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  return ParsePolicy(buf.str(), path);
}

}  // namespace mlsched::policy
