// Fuzz target: terminal escaping of text from elsewhere (common/safe_text.h: every tool prints
// schedd's answers through it). Properties: no crash or UB; the output of every style needs no
// more escaping and escaping it again changes nothing; IsSafeText agrees with SafeText; widths
// count no more characters than bytes and a prefix never ends inside a UTF-8 sequence.
#include "common/safe_text.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using mlsched::TextStyle;
  const std::string text = mlsched::fuzz::Text(data, size);
  for (TextStyle style : {TextStyle::kLine, TextStyle::kMultiline, TextStyle::kJson}) {
    const std::string safe = mlsched::SafeText(text, style);
    FUZZ_CHECK(mlsched::IsSafeText(safe, style));
    FUZZ_CHECK(mlsched::SafeText(safe, style) == safe);
    FUZZ_CHECK(mlsched::IsSafeText(text, style) == (safe == text));
    const size_t chars = mlsched::Utf8Chars(safe);
    FUZZ_CHECK(chars <= safe.size());
    const size_t cut = mlsched::Utf8PrefixBytes(safe, size % (chars + 1));
    FUZZ_CHECK(cut <= safe.size());
    FUZZ_CHECK(mlsched::IsSafeText(safe.substr(0, cut), style));
  }
  return 0;
}
