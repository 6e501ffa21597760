// An in-process fake schedd: a real gRPC server on a Unix socket (or a TCP address, with TLS or as
// a plaintext impostor) implementing AgentService.Connect.
// It answers each registration with `registered` (heartbeat 1 s, the configured keep list), records
// every agent message, acknowledges reliable reports (unless told not to), and lets the test send
// scheduler messages on the current stream. It accepts the agent's keepalive pings every second,
// as schedd must (agentd/session.cc). HA: it stamps its epoch on `registered` and may act as a
// follower, refusing every stream with UNAVAILABLE and x-mlsched-leader.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "mlsched/v1/agent.grpc.pb.h"

namespace mlsched::agent::testing {

class FakeSchedd final : public v1::AgentService::Service {
 public:
  using Pred = std::function<bool(const v1::AgentMessage&)>;

  /// Serves on unix:`socket_path`; `keep` goes into every `registered`.
  explicit FakeSchedd(const std::string& socket_path, std::vector<v1::RunningTask> keep = {}, int64_t epoch = 0)
      : keep_(std::move(keep)), epoch_(epoch) {
    Listen("unix:" + socket_path, grpc::InsecureServerCredentials());
  }
  /// Serves on the TCP `address` ("127.0.0.1:0" picks a free port: Port()) with `creds`: TLS, or
  /// grpc::InsecureServerCredentials() to play a plaintext impostor.
  FakeSchedd(const std::string& address, const std::shared_ptr<grpc::ServerCredentials>& creds) {
    Listen(address, creds);
  }
  ~FakeSchedd() override { Stop(); }

  /// The TCP port served (a TCP address only).
  int Port() const { return port_; }

  /// Ends every stream at once (like a crash) and stops serving.
  void Stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    server_->Wait();
    server_.reset();
  }

  grpc::Status Connect(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::SchedulerMessage, v1::AgentMessage>* stream) override {
    if (follower_of_) {
      ++refused_;
      ctx->AddTrailingMetadata("x-mlsched-leader", *follower_of_);
      return {grpc::StatusCode::UNAVAILABLE, "schedd is a follower; the leader is " + *follower_of_};
    }
    {
      std::lock_guard lk(mu_);
      stream_ = stream;
    }
    v1::AgentMessage m;
    while (stream->Read(&m)) {
      if (m.has_register_()) {
        v1::SchedulerMessage reply;
        reply.mutable_registered()->set_heartbeat_interval_s(1);
        reply.mutable_registered()->set_epoch(epoch_);
        reply.set_epoch(epoch_);
        for (const auto& k : keep_) *reply.mutable_registered()->add_keep() = k;
        std::lock_guard wl(write_mu_);
        stream->Write(reply);
      }
      if (m.seq() != 0 && ack_) {
        v1::SchedulerMessage ack;
        ack.mutable_ack()->set_seq(m.seq());
        ack.set_epoch(epoch_);
        std::lock_guard wl(write_mu_);
        stream->Write(ack);
      }
      std::lock_guard lk(mu_);
      received_.push_back(m);
      cv_.notify_all();
    }
    std::lock_guard lk(mu_);
    stream_ = nullptr;
    ++ended_;
    cv_.notify_all();
    return grpc::Status::OK;
  }

  /// Act as a follower naming `leader` (an address; "" while an election runs): every stream is
  /// refused with UNAVAILABLE. Set before the agent connects.
  void SetFollowerOf(std::string leader) { follower_of_ = std::move(leader); }
  /// Streams refused as a follower.
  int Refused() const { return refused_; }

  /// Whether reliable reports are acknowledged (default: yes), as if they were made durable.
  void SetAck(bool ack) { ack_ = ack; }

  /// Sends `msg` on the current stream, stamped with this schedd's epoch unless it carries one;
  /// false when no agent is connected.
  bool Send(v1::SchedulerMessage msg) {
    if (msg.epoch() == 0) msg.set_epoch(epoch_);
    std::lock_guard lk(mu_);
    if (!stream_) return false;
    std::lock_guard wl(write_mu_);
    return stream_->Write(msg);
  }

  /// The first received message matching `pred`, waiting up to `timeout`.
  std::optional<v1::AgentMessage> WaitFor(const Pred& pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lk(mu_);
    std::optional<v1::AgentMessage> found;
    cv_.wait_for(lk, timeout, [&] {
      for (const auto& m : received_)
        if (pred(m)) {
          found = m;
          return true;
        }
      return false;
    });
    return found;
  }

  /// Number of received messages matching `pred`.
  size_t Count(const Pred& pred) {
    std::lock_guard lk(mu_);
    size_t n = 0;
    for (const auto& m : received_) n += pred(m) ? 1 : 0;
    return n;
  }

  /// All received messages, in order.
  std::vector<v1::AgentMessage> Received() {
    std::lock_guard lk(mu_);
    return received_;
  }

  /// Waits until a stream ended (the agent closed it).
  bool WaitEnded(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return ended_ > 0; });
  }

 private:
  std::vector<v1::RunningTask> keep_;
  int64_t epoch_ = 0;
  std::optional<std::string> follower_of_;
  std::atomic<int> refused_{0};
  void Listen(const std::string& address, const std::shared_ptr<grpc::ServerCredentials>& creds) {
    grpc::ServerBuilder b;
    b.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
    b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
    b.AddListeningPort(address, creds, &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    if (!server_) throw std::runtime_error("FakeSchedd: cannot listen on " + address);
  }

  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_, write_mu_;
  std::condition_variable cv_;
  grpc::ServerReaderWriter<v1::SchedulerMessage, v1::AgentMessage>* stream_ = nullptr;
  std::vector<v1::AgentMessage> received_;
  std::atomic<bool> ack_{true};
  int ended_ = 0;
};

}  // namespace mlsched::agent::testing
