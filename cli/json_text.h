// The tools' --json output: what came from schedd serialised so that it stays valid JSON and is
// safe on a terminal.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace mlsched::cli {

/// `j` as JSON text (`indent` < 0: one line; else pretty with that many spaces). Never throws on
/// strings from schedd: invalid UTF-8 becomes U+FFFD (nlohmann's dump() throws type_error 316 on
/// it), control characters are \u-escaped by the serialiser, and DEL, the C1 code points
/// (U+0080..U+009F) and the bidi controls, which JSON allows raw, are written as \u escapes too
/// (SafeText's kJson style), so printing the output cannot drive a terminal.
std::string JsonText(const nlohmann::json& j, int indent = -1);

}  // namespace mlsched::cli
