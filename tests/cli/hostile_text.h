// A job name / reason / node name as an attacker would write it, for the formatter tests: an OSC
// that retitles the terminal, a screen clear, CR and LF that forge lines, a UTF-8 C1 CSI, an
// invalid byte, then a printable non-ASCII character that must survive.
#pragma once

#include <string>

namespace mlsched::cli::testing {

inline const std::string kHostile = "\x1b]0;pwned\x07\x1b[2J\r\n\xc2\x9b" "0m\xff训";
/// kHostile as every human-readable formatter must print it.
inline const std::string kHostileEscaped = "\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0a\\u009b0m\\xff训";

/// kHostile without the invalid byte: what a gRPC answer can carry in a string field (proto3
/// string fields must be valid UTF-8; the parser refuses the whole message otherwise). Error
/// messages (grpc-message) and files may hold any byte.
inline const std::string kHostileUtf8 = "\x1b]0;pwned\x07\x1b[2J\r\n\xc2\x9b" "0m训";
inline const std::string kHostileUtf8Escaped = "\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\x0a\\u009b0m训";

/// True when `s` holds nothing a terminal acts on except the formatter's own newlines and tabs: no
/// C0 byte but '\n' and '\t', no DEL, no UTF-8 C1 code point (0xc2 0x80-0x9f), no invalid UTF-8 lead 0xff.
inline bool Inert(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f || b == 0xff) return false;
    if (b == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) return false;
  }
  return true;
}

}  // namespace mlsched::cli::testing
