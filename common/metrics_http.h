// A minimal HTTP endpoint (Boost.Beast) that serves Prometheus text exposition format at /metrics.
// Used by schedd and agentd; the metric model itself comes from prometheus-cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace mlsched {

/// Serves GET /metrics on HOST:PORT from one background thread; any other path answers 404.
/// `render` is called per scrape and returns the body (text format 0.0.4).
class MetricsHttpServer {
 public:
  /// Binds at once (port 0 picks a free one); throws std::runtime_error naming the address on failure.
  MetricsHttpServer(const std::string& host, int port, std::function<std::string()> render);
  ~MetricsHttpServer();
  /// The bound port.
  int Port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlsched
