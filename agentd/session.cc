// Agent: the stream to schedd. One connection at a time: register, wait for `registered`, then a
// writer thread drains the outbox (and heartbeats) while this thread reads scheduler messages.
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agentd/agent.h"
#include "common/client.h"
#include "mlsched/v1/agent.grpc.pb.h"

namespace mlsched::agent {

struct Agent::Connection {
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::SchedulerMessage>> stream;
};

namespace {

constexpr std::chrono::seconds kRegistrationTimeout{30};

// A channel that retries connecting on the agent's schedule rather than gRPC's default backoff
// (which grows to 120 s), and notices a vanished host through keepalive pings. The minimum
// reconnect backoff stays at gRPC's default: it doubles as the connection (SETTINGS) timeout. The ping interval
// stays above gRPC servers' default minimum (5 minutes) so schedd never answers "too many pings".
std::shared_ptr<grpc::Channel> MakeAgentChannel(const std::string& address, const AgentConfig& cfg) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(cfg.backoff_initial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(cfg.backoff_max.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 330 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  args.SetMaxReceiveMessageSize(64 * 1024 * 1024);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (IsUnixAddress(address)) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  // TCP: mutual TLS. The files are read for every connection, so rotated certificates are used
  // from the next reconnect on; an unreadable file fails this attempt (logged) and is retried.
  std::shared_ptr<grpc::ChannelCredentials> creds;
  try {
    creds = MakeTlsChannelCredentials(cfg.tls);
  } catch (const std::exception& e) {
    spdlog::error("TLS: {}", e.what());
    creds = grpc::InsecureChannelCredentials();  // schedd's TLS-only listener refuses it: the attempt fails
  }
  return grpc::CreateCustomChannel(address, creds, args);
}

}  // namespace

void Agent::CancelCurrent() {
  if (current_) current_->ctx.TryCancel();
}

void Agent::SessionLoop() {
  auto backoff = cfg_.backoff_initial;
  int failures = 0;
  while (!stopping_) {
    // A fresh channel per attempt (its subchannel is private): it connects at once instead of
    // failing fast with a stale TRANSIENT_FAILURE until gRPC's own backoff expires.
    bool registered = RunConnection(MakeAgentChannel(cfg_.server, cfg_), failures);
    if (stopping_) break;
    failures = registered ? 0 : failures + 1;
    if (registered) backoff = cfg_.backoff_initial;
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, backoff, [&] { return stopping_.load(); });
    backoff = std::min(backoff * 2, cfg_.backoff_max);
  }
  std::lock_guard lk(mu_);
  session_done_ = true;
  cv_.notify_all();
}

bool Agent::RunConnection(const std::shared_ptr<grpc::Channel>& channel, int failures) {
  auto conn = std::make_shared<Connection>();
  PrepareContext(conn->ctx, cfg_.server, /*timeout_s=*/0);
  auto stub = v1::AgentService::NewStub(channel);
  {
    std::lock_guard lk(mu_);
    if (stopping_) return false;
    current_ = conn;
  }
  auto finish = [&](const char* when) {
    grpc::Status st = conn->stream->Finish();
    std::lock_guard lk(mu_);
    current_.reset();
    if (stopping_) return;
    // Every failed attempt while schedd is away would repeat the same line: warn on the first
    // and every 20th, the rest at debug level.
    auto level = failures % 20 == 0 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "stream to schedd {} {}: {} (code {}, {} failed attempt(s) before)", cfg_.server, when,
                st.error_message(), static_cast<int>(st.error_code()), failures);
  };
  // A schedd that accepts the stream but never answers the registration must not hold us forever.
  bool answered = false;
  std::thread watchdog([&] {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, kRegistrationTimeout, [&] { return answered || stopping_; })) {
      spdlog::warn("no answer to the registration in {} s; reconnecting", kRegistrationTimeout.count());
      conn->ctx.TryCancel();
    }
  });
  auto stop_watchdog = [&] {
    {
      std::lock_guard lk(mu_);
      answered = true;
    }
    cv_.notify_all();
    watchdog.join();
  };
  conn->stream = stub->Connect(&conn->ctx);
  v1::SchedulerMessage msg;
  bool ok = conn->stream->Write(MakeRegister()) && conn->stream->Read(&msg);
  stop_watchdog();
  if (!ok) {
    finish("failed before registration");
    return false;
  }
  if (!msg.has_registered()) {
    spdlog::error("schedd answered the registration with message type {}, not 'registered'",
                  static_cast<int>(msg.msg_case()));
    conn->ctx.TryCancel();
    while (conn->stream->Read(&msg)) {
    }
    finish("closed");
    return false;
  }
  HandleRegistered(msg.registered());
  outbox_.SetOnline(true);
  connected_ = true;
  std::atomic<bool> closed{false};
  std::thread writer([&] { WriterLoop(*conn, closed); });
  while (conn->stream->Read(&msg)) HandleMessage(msg);
  connected_ = false;
  outbox_.SetOnline(false);
  closed = true;
  outbox_.Interrupt();
  writer.join();
  finish("closed");
  return true;
}

void Agent::WriterLoop(Connection& conn, const std::atomic<bool>& closed) {
  using Clock = Outbox::Clock;
  auto next_heartbeat = Clock::now() + std::chrono::seconds(heartbeat_interval_s_.load());
  while (!closed) {
    auto until = std::min(next_heartbeat, Clock::now() + std::chrono::milliseconds(200));
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
