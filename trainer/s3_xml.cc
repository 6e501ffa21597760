// Parsing of S3's XML answers, apart from the HTTP code so that it can be tested and fuzzed offline.
#include <cstring>

#include "trainer/s3_store.h"

namespace mltrain {
namespace {

std::string XmlUnescape(std::string s) {
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&quot;", "\""}, {"&apos;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += std::strlen(to)) s.replace(pos, std::strlen(from), to);
  }
  return s;
}

}  // namespace

std::vector<std::string> XmlTexts(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  for (size_t pos = 0; (pos = xml.find(open, pos)) != std::string::npos;) {
    size_t end = xml.find(close, pos);
    if (end == std::string::npos) break;
    out.push_back(XmlUnescape(xml.substr(pos + open.size(), end - pos - open.size())));
    pos = end + close.size();
  }
  return out;
}

S3ListPage ParseListObjectsV2(const std::string& xml, const std::string& root) {
  S3ListPage page;
  for (const std::string& k : XmlTexts(xml, "Key")) {
    // A key outside the listed prefix (a misbehaving or hostile server) is not ours: substr would
    // throw std::out_of_range for a shorter one and return a wrong key for another.
    if (k.size() >= root.size() && k.compare(0, root.size(), root) == 0) page.keys.push_back(k.substr(root.size()));
  }
  auto truncated = XmlTexts(xml, "IsTruncated");
  auto next = XmlTexts(xml, "NextContinuationToken");
  if (!truncated.empty() && truncated.front() == "true" && !next.empty()) page.next_token = next.front();
  return page;
}

}  // namespace mltrain
