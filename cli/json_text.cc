#include "cli/json_text.h"

#include "common/safe_text.h"

namespace mlsched::cli {

std::string JsonText(const nlohmann::json& j, int indent) {
  const std::string text = j.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  if (IsSafeText(text, TextStyle::kJson)) return text;
  return SafeText(text, TextStyle::kJson);
}

}  // namespace mlsched::cli
