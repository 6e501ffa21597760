#include "common/safe_text.h"

#include <cstdint>

namespace mlsched {

namespace {

constexpr char kHex[] = "0123456789abcdef";

// The valid UTF-8 sequence at text[i] (Unicode Table 3-7, well-formed byte sequences): its length
// (1-4) and code point; length 0 when the bytes there are not one.
struct Utf8Seq {
  size_t len = 0;
  uint32_t cp = 0;
};

Utf8Seq DecodeAt(std::string_view text, size_t i) {
  const auto b0 = static_cast<unsigned char>(text[i]);
  if (b0 < 0x80) return {1, b0};
  size_t len;
  uint32_t cp;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2, cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3, cp = b0 & 0x0f;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4, cp = b0 & 0x07;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return {};  // a continuation byte, 0xc0, 0xc1 or 0xf5-0xff
  }
  if (text.size() - i < len) return {};
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(text[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return {};
    cp = (cp << 6) | (b & 0x3f);
  }
  return {len, cp};
}

bool IsBidiControl(uint32_t cp) {
  return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

// True when the code point (or, for an ASCII one, the byte) must be escaped in `style`.
bool MustEscape(uint32_t cp, TextStyle style) {
  if (cp == '\n' || cp == '\t') return style != TextStyle::kMultiline && style != TextStyle::kJson;
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || IsBidiControl(cp);
}

void AppendU(std::string& out, uint32_t cp) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 0xf];
}

void AppendX(std::string& out, unsigned char b) {
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xf];
}

}  // namespace

void AppendSafeText(std::string& out, std::string_view text, TextStyle style) {
  size_t i = 0, clean = 0;  // text[clean, i) is copied as is once something must be escaped
  while (i < text.size()) {
    const Utf8Seq seq = DecodeAt(text, i);
    if (seq.len != 0 && !MustEscape(seq.cp, style)) {
      i += seq.len;
      continue;
    }
    out.append(text, clean, i - clean);
    if (seq.len == 0) {  // one invalid byte; the next byte starts afresh
      if (style == TextStyle::kJson) AppendU(out, 0xfffd);
      else AppendX(out, static_cast<unsigned char>(text[i]));
      i += 1;
    } else {
      if (style == TextStyle::kJson || seq.cp >= 0x80) AppendU(out, seq.cp);
      else AppendX(out, static_cast<unsigned char>(seq.cp));
      i += seq.len;
    }
    clean = i;
  }
  out.append(text, clean, text.size() - clean);
}

std::string SafeText(std::string_view text, TextStyle style) {
  std::string out;
  out.reserve(text.size());
  AppendSafeText(out, text, style);
  return out;
}

bool IsSafeText(std::string_view text, TextStyle style) {
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b >= 0x20 && b < 0x7f) {  // printable ASCII: the common case
      ++i;
      continue;
    }
    const Utf8Seq seq = DecodeAt(text, i);
    if (seq.len == 0 || MustEscape(seq.cp, style)) return false;
    i += seq.len;
  }
  return true;
}

size_t Utf8Chars(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

size_t Utf8PrefixBytes(std::string_view text, size_t chars) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) continue;
    if (seen == chars) return i;
    ++seen;
  }
  return text.size();
}

}  // namespace mlsched
