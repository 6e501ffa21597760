#include <utility>  // Boost 1.74 asio under C++20 needs this first
#include "common/metrics_http.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <chrono>
#include <thread>

namespace mlsched {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct MetricsHttpServer::Impl {
  std::atomic<int> open{0};  // declared first: sessions still queued in `io` decrement it when destroyed
  std::atomic<int64_t> refused{0};
  std::function<std::string()> render;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;

  void Accept();
};

namespace {

/// One connection: read one request head (bounded size and time), answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket sock, MetricsHttpServer::Impl* server) : stream_(std::move(sock)), server_(server) {}
  ~Session() { server_->open.fetch_sub(1); }

  void Start() {
    parser_.header_limit(kMetricsMaxRequestBytes);
    parser_.body_limit(0);
    stream_.expires_after(std::chrono::seconds(kMetricsIoTimeoutSeconds));
    http::async_read(stream_, buf_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout) Answer(http::status::bad_request, "bad request\n");
      return;
    }
    const auto& req = parser_.get();
    if (req.method() == http::verb::get && (req.target() == "/metrics" || req.target().starts_with("/metrics?")))
      Answer(http::status::ok, server_->render(), "text/plain; version=0.0.4; charset=utf-8");
    else
      Answer(http::status::not_found, "try /metrics\n");
  }

  void Answer(http::status status, std::string body, const char* type = "text/plain") {
    res_.version(11);
    res_.result(status);
    res_.set(http::field::server, "mlsched");
    res_.set(http::field::content_type, type);
    res_.set(http::field::connection, "close");
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(std::chrono::seconds(kMetricsIoTimeoutSeconds));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }

  beast::tcp_stream stream_;
  MetricsHttpServer::Impl* server_;
  beast::flat_buffer buf_;
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> res_;
};

}  // namespace

void MetricsHttpServer::Impl::Accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // closed
    if (!ec) {
      if (open.fetch_add(1) >= kMetricsMaxConnections) {
        open.fetch_sub(1);
        refused.fetch_add(1);
        sock.close(ec);
      } else {
        std::make_shared<Session>(std::move(sock), this)->Start();
      }
    }
    Accept();
  });
}

MetricsHttpServer::MetricsHttpServer(const std::string& host, int port, std::function<std::string()> render)
    : impl_(std::make_unique<Impl>()) {
  impl_->render = std::move(render);
  boost::system::error_code ec;
  tcp::endpoint ep(asio::ip::make_address(host, ec), static_cast<unsigned short>(port));
  if (ec) throw std::runtime_error("metrics: bad address '" + host + "': " + ec.message());
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep, ec);
  if (ec) throw std::runtime_error("metrics: cannot bind " + host + ":" + std::to_string(port) + ": " + ec.message());
  impl_->acceptor.listen();
  impl_->Accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int MetricsHttpServer::Port() const { return impl_->acceptor.local_endpoint().port(); }

int64_t MetricsHttpServer::RefusedConnections() const { return impl_->refused.load(); }

}  // namespace mlsched
