#include "schedd/server/auth.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace mlsched::server {

std::string UserName(uint32_t uid) {
  struct passwd pw, *res = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return pw.pw_name;
  return "uid" + std::to_string(uid);
}

PeerCredListener::PeerCredListener(std::string path) : path_(std::move(path)) {
  auto fail = [&](const char* what) {
    throw std::runtime_error("cannot listen on unix:" + path_ + ": " + what + ": " + std::strerror(errno));
  };
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  struct sockaddr_un addr {};
  if (path_.size() >= sizeof(addr.sun_path)) throw std::runtime_error("socket path too long: " + path_);
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail("socket");
  ::unlink(path_.c_str());
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fail("bind");
  ::chmod(path_.c_str(), 0666);
  if (::listen(fd_, 512) != 0) fail("listen");
}

PeerCredListener::~PeerCredListener() {
  Stop();
  if (fd_ >= 0) ::close(fd_);
  ::unlink(path_.c_str());
}

void PeerCredListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void PeerCredListener::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PeerCredListener::AcceptLoop(grpc::Server* server) {
  while (!stop_) {
    struct pollfd p {fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) continue;
    struct ucred cred {};
    socklen_t len = sizeof cred;
    if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(c);
      continue;
    }
    {
      std::lock_guard lk(mu_);
      creds_[c] = cred;  // an fd number reused later is overwritten before gRPC sees the new socket
    }
    grpc::AddInsecureChannelFromFd(server, c);
  }
}

bool PeerCredListener::Lookup(const std::string& peer, struct ucred* out) {
  // gRPC names fd-based endpoints "fd:N".
  if (peer.rfind("fd:", 0) != 0) return false;
  int fd = std::atoi(peer.c_str() + 3);
  std::lock_guard lk(mu_);
  auto it = creds_.find(fd);
  if (it == creds_.end()) return false;
  *out = it->second;
  return true;
}

Authenticator::Authenticator(PeerCredListener* unix_listener, std::string tcp_token,
                             std::function<bool(const std::string&)> is_operator)
    : listener_(unix_listener), token_(std::move(tcp_token)), is_operator_(std::move(is_operator)) {}

namespace {
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}
std::string Meta(grpc::ServerContext* ctx, const char* key) {
  auto it = ctx->client_metadata().find(key);
  return it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
}
}  // namespace

grpc::Status Authenticator::Authenticate(grpc::ServerContext* ctx, Caller* out) const {
  struct ucred cred {};
  if (listener_ && listener_->Lookup(ctx->peer(), &cred)) {
    out->uid = cred.uid;
    out->gid = cred.gid;
    out->user = UserName(cred.uid);
  } else {
    if (token_.empty()) return {grpc::StatusCode::UNAUTHENTICATED, "TCP access is not enabled on this schedd"};
    if (!ConstantTimeEquals(Meta(ctx, kTokenHeaderName), token_))
      return {grpc::StatusCode::UNAUTHENTICATED, "bad or missing token (set MLSCHED_TOKEN or MLSCHED_TOKEN_FILE)"};
    out->user = Meta(ctx, kUserHeaderName);
    if (out->user.empty()) return {grpc::StatusCode::UNAUTHENTICATED, "missing user header"};
    struct passwd pw, *res = nullptr;
    char buf[4096];
    if (getpwnam_r(out->user.c_str(), &pw, buf, sizeof buf, &res) == 0 && res) {
      out->uid = pw.pw_uid;
      out->gid = pw.pw_gid;
    } else {
      out->uid = out->gid = 65534;  // nobody: may submit, cannot run as a local user
    }
  }
  out->privileged = out->uid == 0 || out->uid == ::getuid() || is_operator_(out->user);
  return grpc::Status::OK;
}

}  // namespace mlsched::server
