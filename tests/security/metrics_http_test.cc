// The metrics endpoint under hostile clients: idle connections, too many connections, oversized
// requests. A scrape must still be answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/metrics_http.h"

namespace {

int Connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  timeval tv{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

/// Sends `request` on a new connection and returns everything answered until close ("" on timeout).
std::string Exchange(int port, const std::string& request) {
  int fd = Connect(port);
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("an idle connection does not block a scrape", "[security][metrics]") {
  mlsched::MetricsHttpServer server("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  int idle = Connect(server.Port());  // sends nothing
  std::string r = Exchange(server.Port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK_THAT(r, Catch::StartsWith("HTTP/1.1 200"));
  CHECK_THAT(r, Catch::EndsWith("up 1\n"));
  ::close(idle);
}

TEST_CASE("connections past the cap are closed and the server keeps answering", "[security][metrics]") {
  mlsched::MetricsHttpServer server("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  std::vector<int> idle;
  for (int i = 0; i < mlsched::kMetricsMaxConnections; ++i) idle.push_back(Connect(server.Port()));
  // The next connection is accepted by the kernel and closed by the server at once.
  CHECK(Exchange(server.Port(), "GET /metrics HTTP/1.1\r\n\r\n").empty());
  CHECK(server.RefusedConnections() >= 1);
  for (int fd : idle) ::close(fd);
  std::string r;
  for (int i = 0; i < 50 && r.empty(); ++i) r = Exchange(server.Port(), "GET /metrics HTTP/1.1\r\n\r\n");
  CHECK_THAT(r, Catch::StartsWith("HTTP/1.1 200"));
}

TEST_CASE("oversized, malformed and foreign requests get an error, not a hang", "[security][metrics]") {
  mlsched::MetricsHttpServer server("127.0.0.1", 0, [] { return std::string("up 1\n"); });
  std::string big = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(mlsched::kMetricsMaxRequestBytes, 'a') + "\r\n\r\n";
  CHECK_THAT(Exchange(server.Port(), big), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(Exchange(server.Port(), "NONSENSE\r\n\r\n"), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(Exchange(server.Port(), "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
             Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(Exchange(server.Port(), "GET /etc/passwd HTTP/1.1\r\n\r\n"), Catch::StartsWith("HTTP/1.1 404"));
}
