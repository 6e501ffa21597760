// Spot eviction notices from a cloud metadata endpoint, polled with libcurl.
//   AWS: GET .../latest/meta-data/spot/instance-action -> 404 (no notice) or
//        {"action": "terminate", "time": "2026-11-22T21:00:00Z"}; IMDSv2 tokens are fetched on 401.
//   GCP: GET .../computeMetadata/v1/instance/preempted -> "TRUE" / "FALSE" (sent with the
//        Metadata-Flavor: Google header); GCP gives 30 s between the flag and the shutdown.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace mlsched::agent {

/// A notice to relay to schedd.
struct EvictionNoticeInfo {
  int64_t deadline = 0;  // seconds since epoch when the node is reclaimed
  std::string source;    // "aws-instance-action" or "gcp-preempted"
};

/// Seconds between GCP's preempted flag and the instance stopping.
inline constexpr int64_t kGcpNoticeSeconds = 30;

/// `s` without leading and trailing whitespace.
std::string TrimBlanks(std::string s);

/// "2026-11-22T21:00:00Z" (UTC, optional fractional seconds) -> seconds since epoch.
std::optional<int64_t> ParseUtcTimestamp(const std::string& text);

/// Interprets one metadata response (`http_status`, `body`) at time `now`: a notice, or nullopt for
/// "no notice" (404, "FALSE"). Unrecognized bodies give nullopt and set `*problem`.
std::optional<EvictionNoticeInfo> ParseEvictionResponse(long http_status, const std::string& body, int64_t now,
                                                        std::string* problem);

/// Polls `url` every `interval` on its own thread until it sees a notice, then calls `on_notice`
/// once and stops polling. Fetch errors are logged at debug level and retried.
class EvictionPoller {
 public:
  using NoticeFn = std::function<void(const EvictionNoticeInfo&)>;
  EvictionPoller(std::string url, std::chrono::milliseconds interval, NoticeFn on_notice);
  ~EvictionPoller();
  EvictionPoller(const EvictionPoller&) = delete;
  EvictionPoller& operator=(const EvictionPoller&) = delete;
  void Start();
  void Stop();

 private:
  void Loop();
  /// One GET: HTTP status and body, or nullopt on a transport error (logged).
  std::optional<std::pair<long, std::string>> Fetch(const std::string& imds_token);
  std::string FetchImdsToken();

  std::string url_;
  std::chrono::milliseconds interval_;
  NoticeFn on_notice_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlsched::agent
