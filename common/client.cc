#include "common/client.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mlsched {

std::string ResolveServerAddress(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  if (const char* env = std::getenv("MLSCHED_SERVER"); env && *env) return env;
  return std::string("unix:") + kDefaultSocket;
}

bool IsUnixAddress(const std::string& address) { return address.rfind("unix:", 0) == 0; }

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::string ReadTokenFromEnv() {
  if (const char* t = std::getenv("MLSCHED_TOKEN"); t && *t) return t;
  if (const char* f = std::getenv("MLSCHED_TOKEN_FILE"); f && *f) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
  }
  return "";
}

void PrepareContext(grpc::ClientContext& ctx, const std::string& address, int timeout_s) {
  if (timeout_s > 0) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  if (IsUnixAddress(address)) return;
  ctx.AddMetadata(kTokenHeader, ReadTokenFromEnv());
  std::string user;
  if (struct passwd* pw = getpwuid(getuid())) user = pw->pw_name;
  else user = std::to_string(getuid());
  ctx.AddMetadata(kUserHeader, user);
}

}  // namespace mlsched
