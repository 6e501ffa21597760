// Internal: enum <-> name tables shared by the core's Name/Parse functions.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace mlsched::core::names {

/// The name of `value` in `table`, or "?" when it is not listed.
template <typename E, size_t N>
const char* NameOf(const std::array<std::pair<E, const char*>, N>& table, E value) {
  for (const auto& [v, name] : table)
    if (v == value) return name;
  return "?";
}

/// The value named `s` in `table`, or nullopt.
template <typename E, size_t N>
std::optional<E> ParseName(const std::array<std::pair<E, const char*>, N>& table, const std::string& s) {
  for (const auto& [v, name] : table)
    if (s == name) return v;
  return std::nullopt;
}

}  // namespace mlsched::core::names
