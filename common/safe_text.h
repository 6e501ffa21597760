// Text that came from elsewhere (schedd's answers, other users' job names and reasons, node
// reports, files) made safe to print on a terminal. A terminal acts on control bytes: ESC starts
// sequences that retitle the window, clear the screen, move the cursor or (in some terminals)
// write files; CR overwrites a line; U+0080..U+009F (C1) include an 8-bit CSI; bidi controls
// reorder the rest of a line. Every human-readable formatter of the tools prints through this.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mlsched {

/// How SafeText writes what it escapes.
enum class TextStyle {
  kLine,       // one field of a line: every control byte escaped, newline and tab too
  kMultiline,  // a block (a job's script): newline and tab kept, every other control escaped
  kJson,       // already-serialised JSON: \uXXXX escapes (valid inside JSON strings)
};

/// Appends `text` to `out` with what a terminal would act on made visible:
/// * C0 control bytes (0x00-0x1f, ESC included) and DEL (0x7f) as `\x1b` (two lowercase hex
///   digits; kMultiline keeps '\n' and '\t');
/// * the UTF-8 code points U+0080..U+009F (C1 controls, e.g. CSI U+009B) and the Bidi_Control
///   characters (U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069) as `\u009b`;
/// * every byte that is not part of a valid UTF-8 sequence (stray 0x80-0xbf, overlong forms,
///   surrogates, above U+10FFFF, truncated sequences, 0xc0, 0xc1, 0xf5-0xff) as `\xff`.
/// Valid printable UTF-8 (names in any language) and backslashes are kept as they are, so the
/// result is printable ASCII plus printable UTF-8 and escaping it again changes nothing.
/// kJson writes `\u001b`, `\u007f`, `\u009b`, and `\ufffd` for invalid bytes: applied to the
/// output of a JSON serialiser it keeps the document valid and equal in meaning.
void AppendSafeText(std::string& out, std::string_view text, TextStyle style = TextStyle::kLine);

/// AppendSafeText into a new string.
std::string SafeText(std::string_view text, TextStyle style = TextStyle::kLine);

/// True when SafeText(text, style) == text (nothing to escape); a fast check for the common case.
bool IsSafeText(std::string_view text, TextStyle style = TextStyle::kLine);

/// Characters (code points) of UTF-8 text: the bytes that are not continuation bytes (10xxxxxx).
/// The column widths of the tools' tables count these.
size_t Utf8Chars(std::string_view text);

/// Bytes of the first `chars` characters of `text` (all of it when shorter): a cut there never
/// splits a UTF-8 sequence.
size_t Utf8PrefixBytes(std::string_view text, size_t chars);

}  // namespace mlsched
