#include "schedd/server/etcd_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <fstream>
#include <thread>

namespace mlsched::server {

std::vector<std::string> ParseEtcdEndpoints(const std::string& value) {
  constexpr size_t kMaxEndpoints = 16;
  std::string rest = value;
  if (rest.rfind("etcd://", 0) == 0) rest = rest.substr(7);
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= rest.size()) {
    size_t comma = rest.find(',', start);
    std::string ep = rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (ep.rfind("etcd://", 0) == 0) ep = ep.substr(7);
    size_t colon = ep.rfind(':');
    if (ep.empty() || colon == std::string::npos || colon == 0 || colon + 1 == ep.size())
      throw std::invalid_argument("etcd endpoint '" + ep + "' is not HOST:PORT");
    const std::string port = ep.substr(colon + 1);
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
        std::stoi(port) > 65535)
      throw std::invalid_argument("etcd endpoint '" + ep + "': port must be 1..65535");
    out.push_back(ep);
    if (out.size() > kMaxEndpoints)
      throw std::invalid_argument("at most " + std::to_string(kMaxEndpoints) + " etcd endpoints");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

struct EtcdClient::Conn {
  std::string endpoint;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdpb::KV::Stub> kv;
  std::unique_ptr<etcdpb::Lease::Stub> lease;
  std::unique_ptr<etcdpb::Auth::Stub> auth;
};

namespace {

/// "size:mtime" of each TLS file, to notice a rotation; "?" for a file that cannot be stat'ed.
std::string TlsStamp(const mlsched::TlsFiles& f) {
  std::string out;
  for (const std::string* path : {&f.ca, &f.cert, &f.key}) {
    struct stat st {};
    if (path->empty()) continue;
    if (::stat(path->c_str(), &st) != 0) {
      out += "?;";
      continue;
    }
    out += std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return out;
}

std::string ReadPassword(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the etcd password file " + path);
  std::string s(kMaxPasswordBytes + 1, '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  if (s.size() > kMaxPasswordBytes)
    throw std::runtime_error("etcd password file " + path + " is larger than " + std::to_string(kMaxPasswordBytes) + " bytes");
  if (auto nl = s.find_first_of("\r\n"); nl != std::string::npos) s.resize(nl);
  if (s.empty()) throw std::runtime_error("etcd password file " + path + " is empty");
  return s;
}

}  // namespace

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout, EtcdSecurity security)
    : endpoints_(std::move(endpoints)), timeout_(timeout), security_(std::move(security)) {
  if (endpoints_.empty()) throw std::invalid_argument("no etcd endpoint");
  if (security_.tls.cert.empty() != security_.tls.key.empty())
    throw std::invalid_argument("an etcd client certificate needs both its certificate and its key file");
  if (!security_.tls_enabled() && !security_.tls.cert.empty())
    throw std::invalid_argument("an etcd client certificate needs the CA of etcd's members (--etcd-tls-ca)");
  if (!security_.user.empty()) password_ = ReadPassword(security_.password_file);
  tls_stamp_ = TlsStamp(security_.tls);
  tls_checked_ = std::chrono::steady_clock::now();
  conns_ = Connect();
}

std::vector<std::shared_ptr<EtcdClient::Conn>> EtcdClient::Connect() const {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (security_.tls_enabled()) {
    creds = mlsched::MakeTlsChannelCredentials(security_.tls);  // throws naming the unreadable file
  } else {
    creds = grpc::InsecureChannelCredentials();  // only when configured so (schedd --ha-insecure)
  }
  std::vector<std::shared_ptr<Conn>> conns;
  for (const auto& ep : endpoints_) {
    auto c = std::make_shared<Conn>();
    c->endpoint = ep;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    c->channel = grpc::CreateCustomChannel(ep, creds, args);
    c->kv = etcdpb::KV::NewStub(c->channel);
    c->lease = etcdpb::Lease::NewStub(c->channel);
    c->auth = etcdpb::Auth::NewStub(c->channel);
    conns.push_back(std::move(c));
  }
  return conns;
}

void EtcdClient::MaybeReloadTls() {
  if (!security_.tls_enabled()) return;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(mu_);
    if (now - tls_checked_ < std::chrono::seconds(mlsched::kCertRefreshSeconds)) return;
    tls_checked_ = now;
  }
  const std::string stamp = TlsStamp(security_.tls);
  {
    std::lock_guard lk(mu_);
    if (stamp == tls_stamp_) return;
  }
  try {
    auto conns = Connect();
    std::lock_guard lk(mu_);
    conns_ = std::move(conns);
    tls_stamp_ = stamp;
    spdlog::info("etcd: TLS files changed; new connections use them ({})", security_.tls.cert.empty() ? security_.tls.ca : security_.tls.cert);
  } catch (const std::exception& e) {
    // Mid-rotation (rm + cp) or a bad file: keep the channels made with the last good files.
    spdlog::error("etcd: TLS files changed but cannot be used: {}; keeping the current connections", e.what());
  }
}

std::string EtcdClient::SecurityDescription() const {
  std::string s = !security_.tls_enabled() ? "plaintext" : security_.tls.cert.empty() ? "TLS" : "mutual TLS";
  if (!security_.user.empty()) s += ", RBAC user " + security_.user;
  return s;
}

grpc::Status EtcdClient::Login(Conn& c) {
  etcdpb::AuthenticateRequest req;
  req.set_name(security_.user);
  req.set_password(password_);
  etcdpb::AuthenticateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout_);
  grpc::Status st = c.auth->Authenticate(&ctx, req, &resp);
  if (st.ok()) {
    std::lock_guard lk(mu_);
    token_ = resp.token();
  }
  return st;
}

EtcdClient::~EtcdClient() = default;

template <typename F>
grpc::Status EtcdClient::Call(const char* what, F&& call) {
  MaybeReloadTls();
  const auto deadline = std::chrono::system_clock::now() + timeout_;
  grpc::Status st;
  bool relogged = false;
  for (size_t tries = 0;; ++tries) {
    std::shared_ptr<Conn> c;
    size_t index;
    std::string token;
    {
      std::lock_guard lk(mu_);
      index = current_;
      c = conns_[index];
      token = token_;
    }
    if (!security_.user.empty() && token.empty()) {
      if (grpc::Status login = Login(*c); !login.ok()) {
        st = login;
        if (login.error_code() != grpc::StatusCode::UNAVAILABLE &&
            login.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED)
          return login;  // wrong password, auth not enabled, ...: no other endpoint answers otherwise
      }
      std::lock_guard lk(mu_);
      token = token_;
    }
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("token", token);
    // Each endpoint gets a share of the deadline, so one dead member cannot eat all of it.
    const auto share = std::max<std::chrono::milliseconds>(timeout_ / static_cast<long>(conns_.size()),
                                                            std::chrono::milliseconds(300));
    ctx.set_deadline(std::min(deadline, std::chrono::system_clock::now() + share));
    if (security_.user.empty() || !token.empty()) st = call(*c, &ctx);
    // etcd forgets simple tokens after --auth-token-ttl (and on restart): log in again, once.
    if (!security_.user.empty() && !relogged && st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      relogged = true;
      std::lock_guard lk(mu_);
      if (token_ == token) token_.clear();
      continue;
    }
    const bool moved_on = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                          st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!moved_on || std::chrono::system_clock::now() >= deadline) return st;
    {
      std::lock_guard lk(mu_);
      if (current_ == index) current_ = (current_ + 1) % conns_.size();
    }
    spdlog::debug("etcd {}: {} unavailable ({}); trying the next endpoint", what, c->endpoint, st.error_message());
    if ((tries + 1) % conns_.size() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

namespace {
[[noreturn]] void Fail(const char* what, const grpc::Status& st) {
  throw EtcdError(std::string("etcd ") + what + ": " + st.error_message() + " (gRPC code " +
                  std::to_string(static_cast<int>(st.error_code())) + ")");
}
}  // namespace

etcdpb::RangeResponse EtcdClient::Range(const etcdpb::RangeRequest& req) {
  etcdpb::RangeResponse resp;
  auto st = Call("Range", [&](Conn& c, grpc::ClientContext* ctx) {
    resp.Clear();
    return c.kv->Range(ctx, req, &resp);
  });
  if (!st.ok()) Fail("Range", st);
  return resp;
}

std::vector<mvccpb::KeyValue> EtcdClient::RangePrefix(const std::string& prefix, int64_t* revision, int64_t page) {
  std::vector<mvccpb::KeyValue> out;
  etcdpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(PrefixEnd(prefix));
  req.set_limit(page);
  int64_t rev = revision && *revision > 0 ? *revision : 0;
  for (;;) {
    if (rev) {
      // Later pages read the first page's revision: consistent without another quorum read.
      req.set_revision(rev);
      req.set_serializable(true);
    }
    auto resp = Range(req);
    if (!rev) rev = resp.header().revision();
    for (auto& kv : *resp.mutable_kvs()) out.push_back(std::move(kv));
    if (!resp.more() || resp.kvs_size() == 0) break;
    req.set_key(out.back().key() + std::string(1, '\0'));
  }
  if (revision) *revision = rev;
  return out;
}

etcdpb::TxnResponse EtcdClient::Txn(const etcdpb::TxnRequest& req) {
  etcdpb::TxnResponse resp;
  auto st = Call("Txn", [&](Conn& c, grpc::ClientContext* ctx) {
    resp.Clear();
    return c.kv->Txn(ctx, req, &resp);
  });
  if (!st.ok()) Fail("Txn", st);
  return resp;
}

int64_t EtcdClient::LeaseGrant(int64_t ttl_s) {
  etcdpb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  etcdpb::LeaseGrantResponse resp;
  auto st = Call("LeaseGrant", [&](Conn& c, grpc::ClientContext* ctx) { return c.lease->LeaseGrant(ctx, req, &resp); });
  if (!st.ok()) Fail("LeaseGrant", st);
  if (!resp.error().empty()) throw EtcdError("etcd LeaseGrant: " + resp.error());
  return resp.id();
}

int64_t EtcdClient::LeaseKeepAlive(int64_t lease) {
  etcdpb::LeaseKeepAliveResponse resp;
  auto st = Call("LeaseKeepAlive", [&](Conn& c, grpc::ClientContext* ctx) {
    auto stream = c.lease->LeaseKeepAlive(ctx);
    etcdpb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    if (!stream->Write(req) || !stream->Read(&resp)) {
      stream->WritesDone();
      grpc::Status s = stream->Finish();
      return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keepalive stream closed") : s;
    }
    stream->WritesDone();
    ctx->TryCancel();
    stream->Finish();
    return grpc::Status::OK;
  });
  if (!st.ok()) Fail("LeaseKeepAlive", st);
  return resp.ttl();
}

void EtcdClient::LeaseRevoke(int64_t lease) {
  etcdpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdpb::LeaseRevokeResponse resp;
  auto st = Call("LeaseRevoke", [&](Conn& c, grpc::ClientContext* ctx) { return c.lease->LeaseRevoke(ctx, req, &resp); });
  if (!st.ok()) Fail("LeaseRevoke", st);
}

}  // namespace mlsched::server
