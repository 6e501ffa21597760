#include <utility>  // Boost 1.74 asio under C++20 needs this first
#include "common/metrics_http.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <thread>

namespace mlsched {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

struct MetricsHttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::function<std::string()> render;
  std::thread thread;

  void Serve(tcp::socket sock) {
    boost::beast::flat_buffer buf;
    http::request<http::string_body> req;
    boost::system::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    http::response<http::string_body> res;
    res.version(req.version());
    res.set(http::field::server, "mlsched");
    if (req.method() == http::verb::get && (req.target() == "/metrics" || req.target().starts_with("/metrics?"))) {
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      res.body() = render();
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "text/plain");
      res.body() = "try /metrics\n";
    }
    res.prepare_payload();
    http::write(sock, res, ec);
    sock.shutdown(tcp::socket::shutdown_send, ec);
  }

  void Accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
      if (ec) return;  // acceptor closed
      Serve(std::move(sock));
      Accept();
    });
  }
};

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

}  // namespace mlsched
