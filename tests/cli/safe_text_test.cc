// Text from schedd, other users or files made safe for a terminal (common/safe_text.h): control
// bytes, C1 code points, bidi controls and invalid UTF-8 come out as visible escapes; printable
// UTF-8 stays as it is.
#include <catch2/catch.hpp>

#include <string>

#include "common/safe_text.h"

using namespace mlsched;

namespace {

// True when `s` holds no byte a terminal acts on: no C0 control (but newline and tab when
// `layout`), no DEL, no UTF-8 C1 code point (U+0080..U+009F).
bool InertForTerminal(const std::string& s, bool layout = false) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (layout && (b == '\n' || b == '\t')) continue;
    if (b < 0x20 || b == 0x7f) return false;
    if (b == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("terminal escapes, CR and C1 controls come out as visible escapes", "[cli][safe_text][security]") {
  CHECK(SafeText("\x1b]0;pwned\x07") == "\\x1b]0;pwned\\x07");  // OSC: retitles the window
  CHECK(SafeText("\x1b[2J") == "\\x1b[2J");                    // clears the screen
  CHECK(SafeText("ok\rFAKE") == "ok\\x0dFAKE");                 // overwrites the line
  CHECK(SafeText("a\nb\tc") == "a\\x0ab\\x09c");                // a line per row
  CHECK(SafeText(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(SafeText("del\x7f") == "del\\x7f");
  CHECK(SafeText("\xc2\x9b" "31m") == "\\u009b31m");  // U+009B: CSI as a UTF-8 C1 code point
  CHECK(SafeText("\xc2\x80\xc2\x9f") == "\\u0080\\u009f");
}

TEST_CASE("invalid UTF-8 is escaped byte by byte", "[cli][safe_text][security]") {
  CHECK(SafeText("\x9b" "2J") == "\\x9b2J");      // a raw 8-bit CSI
  CHECK(SafeText("\xff\xfe") == "\\xff\\xfe");
  CHECK(SafeText("a\xc3") == "a\\xc3");            // truncated sequence at the end
  CHECK(SafeText("\xc3(") == "\\xc3(");            // lead byte without its continuation
  CHECK(SafeText("\xc0\xaf") == "\\xc0\\xaf");     // overlong '/'
  CHECK(SafeText("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");  // overlong, 3 bytes
  CHECK(SafeText("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // UTF-16 surrogate
  CHECK(SafeText("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(SafeText("\xe2\x82") == "\\xe2\\x82");     // truncated 3-byte sequence
  CHECK(SafeText("\xc1\x9b") == "\\xc1\\x9b");     // overlong C1 CSI
}

TEST_CASE("printable UTF-8 in other languages is kept", "[cli][safe_text]") {
  for (const char* s : {"训练模型", "обучение", "modèle-é", "🚀 launch", "日本語-テスト", "\xc2\xa0nbsp", "\xef\xbf\xbd",
                        "\xf4\x8f\xbf\xbf", "back\\slash \"q\" 'x'"})
    CHECK(SafeText(s) == s);
  CHECK(SafeText("") == "");
}

TEST_CASE("bidi controls that reorder the rest of a line are escaped", "[cli][safe_text][security]") {
  CHECK(SafeText("evil\xe2\x80\xaetxt.sh") == "evil\\u202etxt.sh");  // RIGHT-TO-LEFT OVERRIDE
  CHECK(SafeText("\xe2\x81\xa6x\xe2\x81\xa9") == "\\u2066x\\u2069");
  CHECK(SafeText("\xe2\x80\x8f\xd8\x9c") == "\\u200f\\u061c");
  CHECK(SafeText("\xe2\x80\x94 dash") == "\xe2\x80\x94 dash");  // U+2014 is printable
}

TEST_CASE("the multi-line style keeps newlines and tabs only", "[cli][safe_text]") {
  CHECK(SafeText("#!/bin/sh\n\techo hi\r\n\x1b[2J", TextStyle::kMultiline) == "#!/bin/sh\n\techo hi\\x0d\n\\x1b[2J");
}

TEST_CASE("the JSON style turns what a terminal acts on into JSON unicode escapes", "[cli][safe_text]") {
  CHECK(SafeText("\"del\x7f \xc2\x9b \xe2\x80\xae\"", TextStyle::kJson) == "\"del\\u007f \\u009b \\u202e\"");
  CHECK(SafeText("\x1b", TextStyle::kJson) == "\\u001b");
  CHECK(SafeText("\xff", TextStyle::kJson) == "\\ufffd");  // JSON cannot carry a raw byte
  CHECK(SafeText("训练", TextStyle::kJson) == "训练");
}

TEST_CASE("escaping is idempotent and its output is inert for every byte and pair", "[cli][safe_text][security]") {
  for (int a = 0; a < 256; ++a)
    for (int b = 0; b < 256; b += (a < 0x80 ? 17 : 1)) {
      std::string in{static_cast<char>(a), static_cast<char>(b), 'x'};
      std::string out = SafeText(in);
      INFO(a << " " << b);
      CHECK(InertForTerminal(out));
      CHECK(SafeText(out) == out);
      CHECK(InertForTerminal(SafeText(in, TextStyle::kMultiline), true));
      CHECK(InertForTerminal(SafeText(in, TextStyle::kJson), true));  // JSON layout: newlines, indentation
    }
}

TEST_CASE("widths count characters and cuts never split one", "[cli][safe_text]") {
  CHECK(Utf8Chars("abc") == 3);
  CHECK(Utf8Chars("训练模型") == 4);
  CHECK(Utf8Chars("🚀x") == 2);
  CHECK(Utf8PrefixBytes("训练模型", 2) == 6);
  CHECK(Utf8PrefixBytes("ab", 5) == 2);
  CHECK(Utf8PrefixBytes("a🚀b", 2) == 5);
}
