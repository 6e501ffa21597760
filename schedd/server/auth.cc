#include "schedd/server/auth.h"

#include <fcntl.h>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <optional>

#include "common/client.h"
#include "common/munge.h"
#include "common/tls.h"

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
  // SOMAXCONN (the kernel caps it at net.core.somaxconn): when 5,000 agents connect at once, a
  // short queue refused the rest (issue 30).
  if (::listen(fd_, SOMAXCONN) != 0) fail("listen");
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
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  while (!stop_) {
    struct pollfd p {fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    // Everything queued, not one connection per wake-up: a reconnect storm fills the queue faster.
    while (!stop_) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) break;  // EAGAIN: the queue is empty (or a transient error: poll again)
      struct ucred cred {};
      socklen_t len = sizeof cred;
      if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        ::close(c);
        continue;
      }
      // The client gave up while the connection waited in the queue (its connect timed out):
      // close it at once rather than set up a transport nobody will use.
      if (struct pollfd q {c, POLLRDHUP, 0}; ::poll(&q, 1, 0) > 0 && (q.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        ::close(c);
        ++abandoned_;
        continue;
      }
      {
        std::lock_guard lk(mu_);
        creds_[c] = cred;  // an fd number reused later is overwritten before gRPC sees the new socket
      }
      grpc::AddInsecureChannelFromFd(server, c);
    }
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

Authenticator::Authenticator(PeerCredListener* unix_listener, AuthConfig cfg,
                             std::function<bool(const std::string&)> is_operator)
    : listener_(unix_listener), cfg_(std::move(cfg)), is_operator_(std::move(is_operator)) {}

grpc::Status Authenticator::Reject(grpc::StatusCode code, std::string why, grpc::ServerContextBase* ctx) const {
  if (metrics_) metrics_->CountRejected("authentication");
  spdlog::warn("refused a call from {}: {}", ctx->peer(), why);
  return {code, std::move(why)};
}

namespace {
// At most `max` bytes of `text` for a log line or an error: bytes outside printable ASCII become
// "\xNN", so a client's payload cannot forge log lines or terminal escapes.
std::string Printable(const std::string& text, size_t max) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (text.size() > max) out += "...";
  return out;
}
}  // namespace

grpc::Status Authenticator::Authenticate(grpc::ServerContextBase* ctx, const std::string& rpc, Caller* out) const {
  struct ucred cred {};
  if (listener_ && listener_->Lookup(ctx->peer(), &cred)) {
    out->uid = cred.uid;
    out->gid = cred.gid;
  } else {
    // TCP: MungeAuthProcessor decoded the call's credential before the request was read.
    auto it = ctx->client_metadata().find(mlsched::kMungeHeader);
    if (it == ctx->client_metadata().end())
      return Reject(grpc::StatusCode::UNAUTHENTICATED, "no MUNGE credential on a TCP call (is munged running on the client host?)", ctx);
    const std::string credential(it->second.data(), it->second.size());
    MungeIdentity id;
    if (verified_) {
      std::optional<MungeIdentity> v = verified_->Take(credential);
      if (!v) return Reject(grpc::StatusCode::UNAUTHENTICATED, "the call's MUNGE credential was not verified", ctx);
      id = *v;
    } else if (MungeResult r = MungeDecode(cfg_.munge_socket, credential, &id); !r.ok()) {
      return Reject(grpc::StatusCode::UNAUTHENTICATED, r.message, ctx);
    }
    if (id.payload != rpc)
      return Reject(grpc::StatusCode::UNAUTHENTICATED,
                    "MUNGE credential was made for '" + Printable(id.payload, 80) + "', not for " + rpc, ctx);
    out->uid = id.uid;
    out->gid = id.gid;
  }
  out->user = UserName(out->uid);
  out->privileged = out->uid == 0 || out->uid == ::getuid() || is_operator_(out->user);
  return grpc::Status::OK;
}

RevocationList::RevocationList(std::string crl_file, std::string ca_file)
    : crl_file_(std::move(crl_file)), ca_file_(std::move(ca_file)) {
  std::lock_guard lk(mu_);
  LoadLocked();
  if (stamp_.empty()) throw std::runtime_error("--tls-crl " + crl_file_ + " cannot be used (see the log)");
}

void RevocationList::LoadLocked() {
  checked_ = std::chrono::steady_clock::now();
  struct stat st {};
  if (::stat(crl_file_.c_str(), &st) != 0) {
    spdlog::error("TLS: CRL {}: {}; the last revocation list read stays in force", crl_file_, std::strerror(errno));
    return;
  }
  const std::string stamp = std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                            std::to_string(st.st_mtim.tv_nsec);
  if (stamp == stamp_) return;
  try {
    bool expired = false;
    auto serials = mlsched::ReadRevokedSerials(crl_file_, ca_file_, &expired);
    revoked_ = std::set<std::string>(serials.begin(), serials.end());
    stamp_ = stamp;
    spdlog::info("TLS: CRL {}: {} revoked certificate(s)", crl_file_, revoked_.size());
    if (expired) spdlog::error("TLS: CRL {} is past its next update: renew it (mlsched-certs.sh crl)", crl_file_);
  } catch (const std::exception& e) {
    spdlog::error("TLS: {}; the last revocation list read stays in force", e.what());
  }
}

bool RevocationList::Revoked(const std::string& serial) {
  std::lock_guard lk(mu_);
  if (std::chrono::steady_clock::now() - checked_ >= std::chrono::seconds(mlsched::kCertRefreshSeconds)) LoadLocked();
  return revoked_.count(serial) > 0;
}

size_t RevocationList::Size() {
  std::lock_guard lk(mu_);
  return revoked_.size();
}

std::string Authenticator::PeerSerial(grpc::ServerContextBase* ctx) const {
  auto auth = ctx->auth_context();
  if (!auth) return "";
  auto pem = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pem.empty()) return "";  // the Unix socket: no certificate
  return mlsched::CertificateSerial(std::string(pem[0].data(), pem[0].size()));
}

bool Authenticator::AgentRevoked(grpc::ServerContextBase* ctx) const {
  if (!crl_) return false;
  auto auth = ctx->auth_context();
  if (!auth || auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty()) return false;
  const std::string serial = PeerSerial(ctx);
  return serial.empty() || crl_->Revoked(serial);
}

grpc::Status MungeAuthProcessor::Process(const InputMetadata& metadata, grpc::AuthContext* context,
                                         OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) {
  auto refuse = [&](std::string why) {
    if (metrics_) metrics_->CountRejected("authentication");
    spdlog::warn("refused a TCP call before reading it: {}", why);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::move(why));
  };
  auto it = metadata.find(mlsched::kMungeHeader);
  if (it == metadata.end()) {
    // Agents prove their node with the certificate; AuthenticateAgent checks the name.
    if (context->IsPeerAuthenticated()) return grpc::Status::OK;
    return refuse("no MUNGE credential and no client certificate (is munged running on the client host?)");
  }
  MungeIdentity id;
  const std::string credential(it->second.data(), it->second.size());
  MungeResult r = MungeDecode(socket_, credential, &id);
  if (!r.ok()) return refuse(r.message);
  verified_->Put(credential, id, std::chrono::steady_clock::now());
  return grpc::Status::OK;
}

void VerifiedCredentials::Put(const std::string& credential, const MungeIdentity& id,
                              std::chrono::steady_clock::time_point now) {
  std::lock_guard lk(mu_);
  // Unclaimed entries age out (and the oldest go when full): the deque is in time order; an entry
  // already taken is skipped when its turn comes.
  while (!order_.empty() && (now - order_.front().first > kTtl || by_credential_.size() >= kMax)) {
    auto found = by_credential_.find(order_.front().second);
    if (found != by_credential_.end() && found->second.at == order_.front().first) by_credential_.erase(found);
    order_.pop_front();
  }
  by_credential_[credential] = Entry{id, now};
  order_.emplace_back(now, credential);
}

std::optional<MungeIdentity> VerifiedCredentials::Take(const std::string& credential) {
  std::lock_guard lk(mu_);
  auto it = by_credential_.find(credential);
  if (it == by_credential_.end()) return std::nullopt;
  MungeIdentity id = it->second.id;
  by_credential_.erase(it);
  return id;
}

size_t VerifiedCredentials::Size() {
  std::lock_guard lk(mu_);
  return by_credential_.size();
}

grpc::Status Authenticator::AuthenticateAgent(grpc::ServerContextBase* ctx, const std::string& node, std::string* identity,
                                              bool* declared_only) const {
  *declared_only = false;
  struct ucred cred {};
  if (listener_ && listener_->Lookup(ctx->peer(), &cred)) {
    std::string user = UserName(cred.uid);
    if (!(cred.uid == 0 || cred.uid == ::getuid() || is_operator_(user)))
      return Reject(grpc::StatusCode::PERMISSION_DENIED,
                    "agents must run as root, schedd's user or an operator (not " + user + ")", ctx);
    *identity = "unix:" + user;
    *declared_only = !(cred.uid == 0 || cred.uid == ::getuid());
    return grpc::Status::OK;
  }
  auto auth = ctx->auth_context();
  std::vector<std::string> names = auth ? mlsched::PeerCertificateNames(*auth) : std::vector<std::string>{};
  if (names.empty())
    return Reject(grpc::StatusCode::UNAUTHENTICATED,
                  "agent for node '" + node + "' presented no node certificate from the cluster CA", ctx);
  if (AgentRevoked(ctx))
    return Reject(grpc::StatusCode::PERMISSION_DENIED,
                  "agent for node '" + node + "' presented a revoked certificate (" + names.front() + ", --tls-crl)", ctx);
  if (std::find(names.begin(), names.end(), node) == names.end())
    return Reject(grpc::StatusCode::PERMISSION_DENIED,
                  "agent certificate names " + names.front() + ", not node '" + node + "'", ctx);
  *identity = "cert:CN=" + names.front();
  return grpc::Status::OK;
}

}  // namespace mlsched::server
