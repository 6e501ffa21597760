#include "common/server_list.h"

namespace mlsched {

namespace {

bool IsUnix(const std::string& a) { return a.rfind("unix:", 0) == 0; }

}  // namespace

int ServerList::IndexOf(const std::string& address) const {
  for (size_t i = 0; i < addresses.size(); ++i)
    if (addresses[i] == address) return static_cast<int>(i);
  return -1;
}

std::string ServerList::Joined() const {
  std::string s;
  for (const auto& a : addresses) s += (s.empty() ? "" : ", ") + a;
  return s;
}

namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

/// "" when `a` is a usable TCP "HOST:PORT" (also "[v6]:PORT"), else why not.
std::string CheckTcpAddress(const std::string& a) {
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0) return "expected HOST:PORT or unix:/abs/path";
  const std::string port = a.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return "the port must be a number from 1 to 65535";
  if (a.find_first_of(" \t/,") != std::string::npos) return "blanks, '/' and ',' are not allowed in HOST:PORT";
  return "";
}

}  // namespace

std::string ParseServerList(const std::string& text, ServerList* out) {
  ServerList list;
  const std::string where = "server list '" + text.substr(0, 2 * kMaxServerAddressBytes) + "': ";
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string entry = Trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (entry.empty()) return where + "empty entry";
    if (list.addresses.size() == kMaxServers)
      return where + "more than " + std::to_string(kMaxServers) + " addresses";
    if (entry.size() > kMaxServerAddressBytes)
      return where + "an address is longer than " + std::to_string(kMaxServerAddressBytes) + " bytes";
    if (IsUnix(entry)) {
      if (entry.size() < 7 || entry[5] != '/') return where + entry + ": a unix: address needs an absolute path";
    } else if (std::string why = CheckTcpAddress(entry); !why.empty()) {
      return where + entry + ": " + why;
    }
    if (list.IndexOf(entry) >= 0) return where + entry + " is named twice";
    list.addresses.push_back(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (list.addresses.size() > 1)
    for (const auto& a : list.addresses)
      if (IsUnix(a))
        return where + a + ": a Unix socket reaches one local schedd and cannot be part of a list of replicas "
                           "(name every replica as HOST:PORT)";
  *out = std::move(list);
  return "";
}

}  // namespace mlsched
