#include "trainer/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "trainer/gloo_communicator.h"
#include "trainer/log.h"

namespace mltrain {
namespace {

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int EnvInt(const char* name, int fallback, int min_value, int max_value) {
  auto v = Env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long parsed = std::strtol(v->c_str(), &end, 10);
  if (end == v->c_str() || *end != '\0' || parsed < min_value || parsed > max_value) {
    throw std::invalid_argument("environment variable " + std::string(name) + "='" + *v + "' is not an integer in [" +
                                std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  }
  return static_cast<int>(parsed);
}

}  // namespace

RendezvousEnv ReadRendezvousEnv() {
  RendezvousEnv env;
  env.world_size = EnvInt("WORLD_SIZE", 1, 1, 65536);
  env.rank = EnvInt("RANK", 0, 0, env.world_size - 1);
  env.local_rank = EnvInt("LOCAL_RANK", 0, 0, 65535);
  env.master_addr = Env("MASTER_ADDR").value_or("");
  env.master_port = EnvInt("MASTER_PORT", 0, 0, 65535);
  env.job_id = Env("MLSCHED_JOB_ID").value_or("standalone");
  env.attempt = Env("MLSCHED_ATTEMPT").value_or("0");
  env.rendezvous_fd = EnvInt("MLSCHED_RENDEZVOUS_FD", -1, 3, 1 << 30);
  if (env.world_size > 1) {
    if (env.master_addr.empty()) throw std::invalid_argument("MASTER_ADDR must be set when WORLD_SIZE > 1");
    if (env.master_port == 0) throw std::invalid_argument("MASTER_PORT must be set (1-65535) when WORLD_SIZE > 1");
    env.token = Env("MLSCHED_RENDEZVOUS_TOKEN").value_or("");
    if (env.token.empty() && Env("MLTRAIN_INSECURE_RENDEZVOUS").value_or("") != "1")
      throw std::invalid_argument(
          "MLSCHED_RENDEZVOUS_TOKEN must be set when WORLD_SIZE > 1 (agentd sets it; by hand, give every rank the "
          "same secret, e.g. $(openssl rand -hex 32), or set MLTRAIN_INSECURE_RENDEZVOUS=1 for a store any local "
          "user can read and write)");
    if (!env.token.empty() && (env.token.size() < kMinRendezvousTokenBytes || env.token.size() > kKvMaxTokenBytes))
      throw std::invalid_argument("MLSCHED_RENDEZVOUS_TOKEN must be " + std::to_string(kMinRendezvousTokenBytes) + " to " +
                                  std::to_string(kKvMaxTokenBytes) + " bytes long, not " + std::to_string(env.token.size()));
  }
  return env;
}

std::unique_ptr<KvServer> StartRendezvousStore(const RendezvousEnv& env) {
  if (env.rank != 0) return nullptr;
  if (env.token.empty() && env.world_size > 1)
    LogWarn("rendezvous store without a token (MLTRAIN_INSECURE_RENDEZVOUS=1): any user of this host can read and "
            "overwrite its keys");
  KvServerOptions options;
  options.address = env.master_addr;
  options.port = env.master_port;
  options.listen_fd = env.rendezvous_fd;
  options.token = env.token;
  options.max_connections = std::min(kKvMaxConnections, 4 * static_cast<size_t>(env.world_size) + 64);
  return std::make_unique<KvServer>(std::move(options));
}

KvClient ConnectRendezvousStore(const RendezvousEnv& env, const KvServer* server, std::chrono::milliseconds timeout) {
  return KvClient(env.master_addr, server != nullptr ? server->port() : env.master_port, env.token, timeout);
}

std::unique_ptr<Communicator> CreateCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options) {
  if (env.world_size == 1) return std::make_unique<SingleRankCommunicator>();
  if (options.allreduce_algorithm != "ring" && options.allreduce_algorithm != "halving-doubling")
    throw std::invalid_argument("unknown all-reduce algorithm '" + options.allreduce_algorithm +
                                "' (expected ring or halving-doubling)");
  return std::make_unique<GlooCommunicator>(env, options);
}

}  // namespace mltrain
