// Agent: the stream to schedd. One connection at a time: register, wait for `registered`, then a
// writer thread drains the outbox (and heartbeats) while this thread reads scheduler messages.
// High availability: with several replicas, a follower's answer (UNAVAILABLE and the leader's
// address in x-mlsched-leader) sends the agent to that member at once, any other end to the next
// member; backoff starts once every member was tried. Messages of a deposed leader (an epoch below
// the highest seen) are refused.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include <random>

#include "agentd/agent.h"
#include "common/client.h"
#include "mlsched/v1/agent.grpc.pb.h"

namespace mlsched::agent {

struct Agent::Connection {
  /// Where the registration stands; guarded by Agent::mu_, changes notify Agent::cv_.
  enum class Registration { kPending, kAccepted, kFailed };
  std::string server;         // the replica
  bool stale_logged = false;  // a message with a stale epoch was logged on this stream
  Registration registration = Registration::kPending;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SchedulerMessage>> stream;
};

namespace {

// A channel that retries connecting on the agent's schedule rather than gRPC's default backoff
// (which grows to 120 s), and notices a vanished or stopped (SIGSTOP) schedd within
// keepalive_time + keepalive_timeout (~15 s by default) through HTTP/2 pings, sent with or without calls and
// however long no data flowed. schedd must accept that: GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS
// at most keepalive_time (1000), GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS 1 and
// GRPC_ARG_HTTP2_MAX_PING_STRIKES 0 on its server, else it closes the connection with
// "too_many_pings". The minimum reconnect backoff doubles as the connection (SETTINGS) timeout:
// gRPC's default (20 s) with one server, cfg.connect_timeout with several, so that a stopped
// replica, whose kernel still accepts connections, is passed over in seconds.
// Fails closed: on TCP the channel is mutual TLS or nothing. A TLS file that cannot be read (a
// rotation done as rm + cp) makes no channel at all (nullptr, `error` says why), and the attempt
// is retried with the normal backoff; plaintext is used only for an explicit unix: address. (It
// used to fall back to insecure credentials, and a plaintext impostor on the TCP address then had
// the agent register and run a uid-0 job as root.)
std::shared_ptr<grpc::Channel> MakeAgentChannel(const std::string& address, const AgentConfig& cfg, std::string* error) {
  grpc::ChannelArguments args;
  if (cfg.servers.size() > 1) args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(cfg.connect_timeout.count()));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(cfg.backoff_initial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(cfg.backoff_max.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(cfg.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(cfg.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (IsUnixAddress(address)) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  // TCP: mutual TLS. The files are read for every connection, so rotated certificates are used
  // from the next reconnect on.
  try {
    return grpc::CreateCustomChannel(address, MakeTlsChannelCredentials(cfg.tls), args);
  } catch (const std::exception& e) {
    *error = std::string("TLS: ") + e.what() + " (no connection without TLS; retrying)";
    return nullptr;
  }
}

/// A wait drawn uniformly from [b/2, b] (equal jitter; see AgentConfig::backoff_initial).
std::chrono::milliseconds Jittered(std::chrono::milliseconds b) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  const int64_t half = b.count() / 2;
  return std::chrono::milliseconds(half + std::uniform_int_distribution<int64_t>(0, b.count() - half)(rng));
}

}  // namespace

void Agent::CancelCurrent() {
  if (current_) current_->ctx.TryCancel();
}

std::string Agent::Server() const { return cfg_.servers.empty() ? "" : cfg_.servers[server_index_.load()]; }

size_t Agent::NextServer(size_t current, const ConnectionEnd& end) const {
  const size_t n = cfg_.servers.size();
  if (!end.leader_hint.empty())
    for (size_t i = 0; i < n; ++i)
      if (i != current && cfg_.servers[i] == end.leader_hint) return i;
  return (current + 1) % n;
}

void Agent::SessionLoop() {
  auto backoff = cfg_.backoff_initial;
  const size_t n = cfg_.servers.size();
  int failures = 0;
  size_t index = 0, tried = 0;  // members tried since the last registration or backoff
  while (!stopping_ && n > 0) {
    server_index_ = index;
    // A fresh channel per attempt (its subchannel is private): it connects at once instead of
    // failing fast with a stale TRANSIENT_FAILURE until gRPC's own backoff expires.
    ConnectionEnd end = RunConnection(cfg_.servers[index], failures);
    if (stopping_) break;
    failures = end.registered ? 0 : failures + 1;
    tried = end.registered ? 0 : tried + 1;
    if (end.registered) backoff = cfg_.backoff_initial;
    const size_t next = NextServer(index, end);
    const bool hinted = next != index && cfg_.servers[next] == end.leader_hint;
    if (hinted) spdlog::info("schedd {} is a follower; following the leader {}", cfg_.servers[index], end.leader_hint);
    index = next;
    // Straight on to the leader named, or to the next member, until every member was tried once
    // (one more call when the last one named the leader); only then back off.
    if (hinted && tried <= n) continue;
    if (n > 1 && !end.registered && tried < n) continue;
    tried = 0;
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, Jittered(backoff), [&] { return stopping_.load(); });
    backoff = std::min(backoff * 2, cfg_.backoff_max);
  }
  std::lock_guard lk(mu_);
  session_done_ = true;
  cv_.notify_all();
}

bool Agent::AcceptEpoch(int64_t epoch, Connection& conn) {
  const int64_t seen = epoch_.load();
  if (epoch < seen) {
    if (metrics_) metrics_->CountStaleEpoch();
    if (!conn.stale_logged)
      spdlog::warn("refusing messages of schedd {} with epoch {}: this agent has seen epoch {} (a newer leader); "
                   "they are not acted upon (logged once per stream)", conn.server, epoch, seen);
    conn.stale_logged = true;
    return false;
  }
  if (epoch > seen) {
    // On disk before anything of the new leader is acted upon: a restart still refuses the old one.
    if (std::string err = epoch_file_ ? epoch_file_->Store(epoch) : ""; !err.empty())
      spdlog::error("epoch: {}; epoch {} is kept in memory only", err, epoch);
    epoch_ = epoch;
    if (metrics_) metrics_->SetEpoch(epoch);
    spdlog::info("controller epoch is now {} (was {}), schedd {}", epoch, seen, conn.server);
  }
  return true;
}

bool Agent::AcceptRegistration(const v1::SchedulerMessage& msg, Connection& conn) {
  if (!msg.has_registered()) {
    spdlog::error("schedd {} answered the registration with message type {}, not 'registered'", conn.server,
                  static_cast<int>(msg.msg_case()));
    return false;
  }
  if (AcceptEpoch(std::max(msg.epoch(), msg.registered().epoch()), conn)) return true;
  spdlog::warn("schedd {} registered this node with an epoch below {}: a deposed leader; closing the stream and "
               "trying another member", conn.server, epoch_.load());
  return false;
}

std::shared_ptr<grpc::Channel> Agent::SessionChannel(std::string* server) {
  {
    std::lock_guard lk(mu_);
    if (!current_) return nullptr;
    *server = current_->server;
  }
  std::string error;
  auto channel = MakeAgentChannel(*server, cfg_, &error);
  if (!channel) spdlog::warn("sessions: no channel to schedd {}: {}", *server, error);
  return channel;
}

Agent::ConnectionEnd Agent::RunConnection(const std::string& server, int failures) {
  auto conn = std::make_shared<Connection>();
  conn->server = server;
  PrepareContext(conn->ctx, server, /*timeout_s=*/0);
  std::string channel_error;
  auto channel = MakeAgentChannel(server, cfg_, &channel_error);
  if (!channel) {  // nothing was sent: a failed attempt, retried after the backoff
    if (failures % 20 == 0) spdlog::error("schedd {}: {} ({} failed attempt(s) before)", server, channel_error, failures);
    else spdlog::debug("schedd {}: {}", server, channel_error);
    return {};
  }
  auto stub = v1::AgentService::NewStub(channel);
  {
    std::lock_guard lk(mu_);
    if (stopping_) return {};
    current_ = conn;
  }
  ConnectionEnd end;
  auto finish = [&](const char* when) {
    grpc::Status st = conn->stream->Finish();
    end.leader_hint = LeaderHintOf(conn->ctx).leader;
    std::lock_guard lk(mu_);
    current_.reset();
    if (stopping_) return;
    // Every failed attempt while schedd is away would repeat the same line: warn on the first
    // and every 20th, the rest at debug level. A follower's answer is no failure: info.
    auto level = !end.leader_hint.empty() ? spdlog::level::info
                 : failures % 20 == 0      ? spdlog::level::warn
                                           : spdlog::level::debug;
    spdlog::log(level, "stream to schedd {} {}: {} (code {}, {} failed attempt(s) before)", server, when,
                st.error_message(), static_cast<int>(st.error_code()), failures);
  };
  // Two threads per stream, however it goes: this one reads; the second one is first the
  // registration watchdog, then the writer (hollow_agents holds 10,000 agents in one process, within
  // the machine's pid_max of 32,768).
  conn->stream = stub->Connect(&conn->ctx);
  std::atomic<bool> closed{false};
  std::thread writer([&] { WriterThread(*conn, closed); });
  auto settle = [&](Connection::Registration r) {
    {
      std::lock_guard lk(mu_);
      conn->registration = r;
    }
    cv_.notify_all();
  };
  v1::SchedulerMessage msg;
  auto wall_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
  const int64_t sent_ms = wall_ms();
  if (!(conn->stream->Write(MakeRegister()) && conn->stream->Read(&msg))) {
    settle(Connection::Registration::kFailed);
    writer.join();
    finish("failed before registration");
    return end;
  }
  if (!AcceptRegistration(msg, *conn)) {
    settle(Connection::Registration::kFailed);
    writer.join();
    conn->ctx.TryCancel();
    while (conn->stream->Read(&msg)) {
    }
    finish("closed");
    return end;
  }
  end.registered = true;
  if (health_ && health_->Enabled() && msg.registered().time() > 0)
    health_->ObserveClock(sent_ms, wall_ms(), msg.registered().time());
  HandleRegistered(msg.registered());
  outbox_.SetOnline(true);
  {
    std::lock_guard lk(mu_);
    cutoff_done_ = false;
    connected_ = true;
  }
  settle(Connection::Registration::kAccepted);
  while (conn->stream->Read(&msg)) HandleMessage(msg, *conn);
  {
    std::lock_guard lk(mu_);
    disconnected_since_ = std::chrono::steady_clock::now();
    connected_ = false;
  }
  outbox_.SetOnline(false);
  closed = true;
  outbox_.Interrupt();
  writer.join();
  finish("closed");
  return end;
}

void Agent::WriterThread(Connection& conn, const std::atomic<bool>& closed) {
  {
    // A schedd that accepts the stream but never answers the registration must not hold us forever.
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, cfg_.registration_timeout,
                      [&] { return conn.registration != Connection::Registration::kPending; })) {
      spdlog::warn("no answer to the registration from {} in {} s; trying again", conn.server,
                   cfg_.registration_timeout.count());
      conn.ctx.TryCancel();
      return;
    }
    if (conn.registration != Connection::Registration::kAccepted) return;
  }
  WriterLoop(conn, closed);
}

void Agent::WriterLoop(Connection& conn, const std::atomic<bool>& closed) {
  using Clock = Outbox::Clock;
  auto next_heartbeat = Clock::now() + std::chrono::seconds(heartbeat_interval_s_.load());
  while (!closed) {
    // Asleep until a message is queued or the next heartbeat is due (Shutdown wakes it); while
    // draining, it also looks every 200 ms whether schedd has acknowledged everything.
    auto until = draining_ ? std::min(next_heartbeat, Clock::now() + std::chrono::milliseconds(200)) : next_heartbeat;
    auto m = outbox_.Pop(until);
    if (m) {
      // A report that fails to go out stays unacknowledged: the next connection sends it again.
      if (closed || !conn.stream->Write(*m)) return;
      continue;
    }
    if (draining_ && outbox_.Size() == 0 && outbox_.Unacked() == 0) {
      conn.stream->WritesDone();  // schedd ends the call; the reader then sees the end
      return;
    }
    if (Clock::now() >= next_heartbeat) {
      if (!conn.stream->Write(MakeHeartbeat())) return;
      next_heartbeat = Clock::now() + std::chrono::seconds(heartbeat_interval_s_.load());
    }
  }
}

}  // namespace mlsched::agent
