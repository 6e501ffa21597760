#include "schedd/server/rendezvous_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace mlsched::server {

std::string NewRendezvousToken() {
  uint8_t bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom for a rendezvous token");
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(bytes));
  for (uint8_t b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  return out;
}

}  // namespace mlsched::server
