#include "common/munge.h"

#include <munge.h>

#include <cstdlib>
#include <memory>

namespace mlsched {

std::string ResolveMungeSocket(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("MLSCHED_MUNGE_SOCKET"); env && *env) return env;
  return kDefaultMungeSocket;
}

namespace {

using CtxPtr = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, decltype(&munge_ctx_destroy)>;

CtxPtr MakeCtx(const std::string& socket) {
  CtxPtr ctx(munge_ctx_create(), &munge_ctx_destroy);
  if (ctx && !socket.empty()) munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket.c_str());
  return ctx;
}

// An explanation for the errors a user or an admin can act on; munge's own text otherwise.
std::string Explain(munge_err_t e, munge_ctx_t ctx, const std::string& socket) {
  std::string detail = ctx && munge_ctx_strerror(ctx) ? munge_ctx_strerror(ctx) : munge_strerror(e);
  switch (e) {
    case EMUNGE_SOCKET:
      return "cannot reach munged at " + socket + " (is munged running? set MLSCHED_MUNGE_SOCKET): " + detail;
    case EMUNGE_CRED_EXPIRED: return "MUNGE credential expired (check the clocks of both hosts): " + detail;
    case EMUNGE_CRED_REWOUND: return "MUNGE credential made in the future (clock skew between hosts): " + detail;
    case EMUNGE_CRED_REPLAYED: return "MUNGE credential replayed (each credential is accepted once): " + detail;
    case EMUNGE_CRED_INVALID:
      return "MUNGE credential invalid (made with another key? every host needs the cluster's munge.key): " + detail;
    default: return std::string("MUNGE: ") + detail;
  }
}

}  // namespace

MungeResult MungeEncode(const std::string& socket, const std::string& payload, int ttl_s, std::string* credential) {
  if (payload.size() > kMaxMungePayloadBytes)
    return {EMUNGE_BAD_LENGTH, "MUNGE payload of " + std::to_string(payload.size()) + " bytes exceeds " +
                                   std::to_string(kMaxMungePayloadBytes)};
  CtxPtr ctx = MakeCtx(socket);
  if (!ctx) return {EMUNGE_NO_MEMORY, "MUNGE: cannot create a context"};
  if (ttl_s > 0) munge_ctx_set(ctx.get(), MUNGE_OPT_TTL, ttl_s);
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  if (e != EMUNGE_SUCCESS) {
    std::free(cred);
    return {e, Explain(e, ctx.get(), socket)};
  }
  credential->assign(cred);
  std::free(cred);
  return {};
}

MungeResult MungeDecode(const std::string& socket, const std::string& credential, MungeIdentity* out) {
  if (credential.empty()) return {EMUNGE_BAD_CRED, "missing MUNGE credential"};
  if (credential.size() > kMaxMungeCredentialBytes)
    return {EMUNGE_BAD_LENGTH, "MUNGE credential of " + std::to_string(credential.size()) + " bytes exceeds " +
                                   std::to_string(kMaxMungeCredentialBytes)};
  CtxPtr ctx = MakeCtx(socket);
  if (!ctx) return {EMUNGE_NO_MEMORY, "MUNGE: cannot create a context"};
  void* buf = nullptr;
  int len = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  munge_err_t e = munge_decode(credential.c_str(), ctx.get(), &buf, &len, &uid, &gid);
  std::string payload = buf && len > 0 ? std::string(static_cast<const char*>(buf), static_cast<size_t>(len)) : "";
  std::free(buf);  // allocated for some failures too (expired, replayed)
  if (e != EMUNGE_SUCCESS) return {e, Explain(e, ctx.get(), socket)};
  out->uid = uid;
  out->gid = gid;
  out->payload = std::move(payload);
  return {};
}

}  // namespace mlsched
