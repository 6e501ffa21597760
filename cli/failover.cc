#include "cli/failover.h"

#include <algorithm>

namespace mlsched::cli {

namespace {

int IndexOf(const std::vector<std::string>& servers, const std::string& address) {
  auto it = std::find(servers.begin(), servers.end(), address);
  return it == servers.end() ? -1 : static_cast<int>(it - servers.begin());
}

}  // namespace

FailoverResult CallWithFailover(const std::vector<std::string>& servers, size_t* current,
                                const std::function<HopResult(size_t)>& call, bool only_safe_hops) {
  FailoverResult out;
  const size_t n = servers.size();
  if (n == 0) {
    out.status = {kCodeUnavailable, "no schedd address configured", {}};
    return out;
  }
  if (*current >= n) *current = 0;
  std::vector<bool> tried(n, false), dead(n, false);
  for (size_t calls = 0; calls < n + 1; ++calls) {
    const size_t i = *current;
    HopResult r = call(i);
    if (!tried[i]) out.tried.push_back(servers[i]);
    tried[i] = true;
    out.status = r.status;
    if (r.status.code == kCodeDeadlineExceeded) {
      out.ambiguous = true;
      *current = (i + 1) % n;
      return out;
    }
    if (r.status.code != kCodeUnavailable) return out;
    const bool nothing_done = r.follower || r.unsent;
    if (!nothing_done) out.ambiguous = true;
    if (!nothing_done && only_safe_hops) return out;
    if (!r.follower) dead[i] = true;
    const int hinted = r.leader_hint.empty() ? -1 : IndexOf(servers, r.leader_hint);
    if (hinted >= 0 && static_cast<size_t>(hinted) != i && !dead[static_cast<size_t>(hinted)]) {
      *current = static_cast<size_t>(hinted);
      continue;
    }
    size_t next = n;
    for (size_t k = 1; k < n && next == n; ++k)
      if (!tried[(i + k) % n]) next = (i + k) % n;
    if (next == n) {
      *current = (i + 1) % n;  // every member tried: the caller's retry starts after the last one
      return out;
    }
    *current = next;
  }
  return out;
}

}  // namespace mlsched::cli
