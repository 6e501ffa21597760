#include "agentd/patterns.h"

#include <cctype>
#include <filesystem>

namespace mlsched::agent {
namespace {

std::string ZeroPad(const std::string& digits, size_t width) {
  if (digits.size() >= width) return digits;
  return std::string(width - digits.size(), '0') + digits;
}

}  // namespace

Parsed<std::string> ExpandOutputPattern(const std::string& pattern, const PatternValues& values) {
  Parsed<std::string> result;
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    size_t j = i + 1;
    size_t width = 0;
    while (j < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[j])) && width < 64)
      width = width * 10 + static_cast<size_t>(pattern[j++] - '0');
    if (j >= pattern.size()) {
      result.error = "bad output pattern '" + pattern + "': it ends with a lone '%'";
      return result;
    }
    switch (pattern[j]) {
      case '%': out += '%'; break;
      case 'j': out += ZeroPad(std::to_string(values.job_id), width); break;
      case 't': out += ZeroPad(std::to_string(values.rank), width); break;
      case 'u': out += values.user; break;
      case 'x': out += values.job_name; break;
      case 'n': out += values.node; break;
      case 'A': out += ZeroPad(std::to_string(values.array_job_id ? values.array_job_id : values.job_id), width); break;
      case 'a': out += ZeroPad(std::to_string(values.array_task_id), width); break;
      default:
        result.error = "bad output pattern '" + pattern + "': unknown specifier %" + std::string(1, pattern[j]) +
                       " (known: %j %t %u %x %n %A %a %%)";
        return result;
    }
    i = j;
  }
  result.value = std::move(out);
  return result;
}

Parsed<std::string> ResolveOutputPath(const std::string& pattern, const std::string& fallback,
                                      const PatternValues& values, const std::string& workdir) {
  auto expanded = ExpandOutputPattern(pattern.empty() ? fallback : pattern, values);
  if (!expanded) return expanded;
  if (expanded.value->empty()) {
    expanded.value.reset();
    expanded.error = "output pattern '" + pattern + "' expands to an empty path";
    return expanded;
  }
  std::filesystem::path p(*expanded.value);
  if (p.is_relative()) p = std::filesystem::path(workdir) / p;
  expanded.value = p.lexically_normal().string();
  return expanded;
}

}  // namespace mlsched::agent
