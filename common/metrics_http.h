// A minimal HTTP endpoint (Boost.Beast) that serves Prometheus text exposition format at /metrics.
// Used by schedd and agentd; the metric model itself comes from prometheus-cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mlsched {

/// Most connections served at once; further ones are closed at accept.
inline constexpr int kMetricsMaxConnections = 64;
/// Seconds a connection has to send its request (and later to take the response) before it is closed.
inline constexpr int kMetricsIoTimeoutSeconds = 5;
/// Largest request head accepted (bytes); a request with a body is refused.
inline constexpr unsigned kMetricsMaxRequestBytes = 8 * 1024;

/// Serves GET /metrics on HOST:PORT from one background thread; any other path answers 404.
/// Connections are served concurrently (asynchronous I/O): an idle or slow client holds only its
/// own connection, for at most kMetricsIoTimeoutSeconds. `render` is called per scrape and returns
/// the body (text format 0.0.4).
class MetricsHttpServer {
 public:
  /// Binds at once (port 0 picks a free one); throws std::runtime_error naming the address on failure.
  MetricsHttpServer(const std::string& host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();
  /// The bound port.
  int Port() const;
  /// Connections refused at accept because kMetricsMaxConnections were open (for tests and logs).
  int64_t RefusedConnections() const;

  struct Impl;  // defined in metrics_http.cc (its connection sessions use it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlsched
