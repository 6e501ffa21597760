#include "schedd/server/agent_gateway.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "schedd/server/admission.h"
#include "schedd/server/services.h"

namespace mlsched::server {

namespace {

/// Fault injection for the exactly-once tests (tests/e2e/crash_e2e.sh), in the spirit of etcd's
/// gofail: with MLSCHED_FAILPOINT=crash-before-report:N in its environment, schedd SIGKILLs itself
/// on reading the N-th reliable agent report, before handling it: the window where a report has
/// reached schedd but its effect is not durable. Unset (production), it costs one atomic load.
bool CrashBeforeReport() {
  static std::atomic<int64_t> left = [] {
    const char* v = std::getenv("MLSCHED_FAILPOINT");
    const std::string prefix = "crash-before-report:";
    if (!v || std::string(v).rfind(prefix, 0) != 0) return int64_t{-1};
    spdlog::warn("failpoint armed: {}", v);
    return static_cast<int64_t>(std::atoll(v + prefix.size()));
  }();
  if (left.load(std::memory_order_relaxed) < 0) return false;
  return left.fetch_sub(1) == 1;
}

}  // namespace

/// One agent stream. gRPC calls its reactions (OnReadDone, OnWriteDone, OnCancel, OnDone) on its
/// own threads; the messages read wait in `inbox_` for one worker at a time (Drain), so a node's
/// messages reach the Controller in order. One read and one write are outstanding at most.
/// Finish is called once, with `mu_` released (gRPC may run OnDone inline in it), after the
/// write in flight completed; the stream keeps itself alive (`self_`) until OnDone.
class AgentGateway::Stream final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>,
                                   public std::enable_shared_from_this<Stream> {
 public:
  Stream(AgentGateway& gw, grpc::CallbackServerContext* ctx) : gw_(gw), ctx_(ctx) {}

  /// Takes ownership of itself until OnDone; refuses the call on a follower, else starts reading.
  void Begin(std::shared_ptr<Stream> self) {
    std::unique_lock lk(mu_);
    self_ = std::move(self);
    if (gw_.closed_) {  // schedd is shutting down (CloseStreams)
      closing_ = true;
      status_ = gw_.closed_status_;
      Pump(lk);
      return;
    }
    if (gw_.gate_) {
      if (auto refused = gw_.gate_->Refuse(ctx_)) {
        closing_ = true;
        status_ = *refused;
        Pump(lk);
        return;
      }
    }
    StartReadLocked();
  }

  void OnReadDone(bool ok) override {
    std::lock_guard lk(mu_);
    reading_ = false;
    if (!ok) {
      reads_done_ = true;  // the agent closed its side, or the call ended
    } else {
      last_read_ = WallNow();
      inbox_.push_back(std::move(read_msg_));
      if (inbox_.size() < kMaxQueuedReads) StartReadLocked();
    }
    ScheduleLocked();
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lk(mu_);
    writing_ = false;
    if (!ok && !closing_) {
      closing_ = true;
      status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "writing to the agent failed");
    }
    if (!ok) outbox_.clear();
    Pump(lk);
  }

  void OnCancel() override { Close(grpc::Status(grpc::StatusCode::CANCELLED, "the agent stream was cancelled")); }

  void OnDone() override {
    std::shared_ptr<Stream> keep;
    {
      std::lock_guard lk(mu_);
      done_ = true;
      ScheduleLocked();  // the worker forgets the stream (Forget), after any message still queued
      keep = std::move(self_);
    }
  }  // `keep` may be the last reference: nothing touches `this` after it

  /// Queues `m` for the agent (`front`: before anything queued); false once the stream closes.
  bool Queue(v1::SchedulerMessage m, bool front = false) {
    std::unique_lock lk(mu_);
    if (closing_) return false;
    if (front) outbox_.push_front(std::move(m));
    else outbox_.push_back(std::move(m));
    Pump(lk);
    return true;
  }

  /// Queues Registered in front of anything the Controller queued meanwhile and starts writing.
  void QueueRegistered(v1::SchedulerMessage registered) {
    std::unique_lock lk(mu_);
    if (closing_) return;
    outbox_.push_front(std::move(registered));
    registered_ = true;
    Pump(lk);
  }

  /// Ends the stream with `st`: with OK after the queued messages went out; otherwise at once,
  /// dropping what is queued both ways. Later calls do nothing.
  void Close(grpc::Status st) {
    std::unique_lock lk(mu_);
    if (closing_) return;
    closing_ = true;
    status_ = std::move(st);
    inbox_.clear();
    if (!status_.ok()) outbox_.clear();
    Pump(lk);
  }

  /// Closes the stream on an error after the Controller learnt that the node is disconnected, so
  /// that nothing is placed on it once the agent sees the error (the order the synchronous
  /// handler had).
  void Fail(grpc::Status st) {
    ForgetOnce();
    Close(std::move(st));
  }

  /// Gateway::Forget, once per stream.
  void ForgetOnce() {
    {
      std::lock_guard lk(mu_);
      if (forgotten_) return;
      forgotten_ = true;
    }
    gw_.Forget(*this);
  }

  /// Cancels the call (a newer stream of the same node replaces it); its reactions then close it.
  void Cancel() {
    std::lock_guard lk(mu_);
    if (!done_) ctx_->TryCancel();
  }

  /// Runs f(ctx) under the stream's lock while the call is alive (gRPC frees the context after
  /// OnDone, which waits for the lock); false when it has ended.
  template <typename F>
  bool WithContext(F&& f) {
    std::lock_guard lk(mu_);
    if (done_) return false;
    f(ctx_);
    return true;
  }

  /// The wall time (s) the agent was last heard from: `now` while its messages wait or are being
  /// handled (schedd is behind, not the node).
  int64_t LastHeard(int64_t now) {
    std::lock_guard lk(mu_);
    return !inbox_.empty() || busy_ ? now : last_read_;
  }

  /// Worker: hands the queued messages to the gateway in order, then, once the call is over,
  /// forgets the stream. Exactly one Drain runs per stream at a time (draining_).
  void Drain() {
    std::unique_lock lk(mu_);
    while (true) {
      busy_ = false;
      if (!closing_ && !inbox_.empty() && unacked_ >= kMaxQueuedReads) {
        waiting_ = true;  // Completed() schedules the drain again
        draining_ = false;
        return;
      }
      if (inbox_.empty() || closing_) {
        inbox_.clear();
        if (reads_done_ && !closing_) {  // the agent ended its side: finish after the queued acks
          closing_ = true;
          status_ = grpc::Status::OK;
          Pump(lk);  // may release the lock
          if (!lk.owns_lock()) lk.lock();
          continue;
        }
        if (done_ && !forgotten_) {
          lk.unlock();
          ForgetOnce();
          lk.lock();
          continue;
        }
        draining_ = false;
        return;
      }
      v1::AgentMessage msg = std::move(inbox_.front());
      inbox_.pop_front();
      busy_ = true;
      if (!reading_ && !reads_done_ && inbox_.size() < kMaxQueuedReads / 2) StartReadLocked();
      const bool first = !register_seen_;
      register_seen_ = true;
      lk.unlock();
      try {
        if (first) {
          gw_.Register(shared_from_this(), msg);
        } else if (!gw_.Handle(shared_from_this(), msg)) {
          Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "schedd closed the agent stream; register again"));
        }
      } catch (const std::exception& e) {
        // A failing store (disk full, I/O error) ends this stream, never schedd: the agent reconnects.
        spdlog::error("node {}: agent stream failed: {}; closing it", node.empty() ? "?" : node, e.what());
        if (gw_.ctl_) gw_.ctl_->CountInternalError();
        Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string("schedd could not handle the agent stream: ") + e.what()));
      }
      lk.lock();
    }
  }

  /// Counts a message applied and not yet completed (Handle).
  void Applied() {
    std::lock_guard lk(mu_);
    ++unacked_;
  }

  /// The completer finished one applied message; resumes a drain that waited for it.
  void Completed() {
    std::lock_guard lk(mu_);
    --unacked_;
    if (waiting_) {
      waiting_ = false;
      ScheduleLocked();
    }
  }

  std::string node;    // set by Register (worker) before the stream is in sessions_
  std::string serial;  // the agent certificate's serial ("" on the Unix socket), for the CRL

 private:
  void StartReadLocked() {
    if (reading_ || reads_done_ || closing_) return;
    reading_ = true;
    StartRead(&read_msg_);  // its reaction never runs inline (gRPC: can_inline false for reads)
  }

  void ScheduleLocked() {
    if (draining_) return;
    draining_ = true;
    gw_.Post([self = shared_from_this()] { self->Drain(); });
  }

  /// Starts the next write, or the Finish once closing and nothing is in flight. Finish is called
  /// with the lock released (`lk` is then unlocked on return).
  void Pump(std::unique_lock<std::mutex>& lk) {
    if (finished_ || writing_) return;
    if (!outbox_.empty() && registered_) {
      write_msg_ = std::move(outbox_.front());
      outbox_.pop_front();
      write_msg_.set_epoch(gw_.epoch_);
      writing_ = true;
      StartWrite(&write_msg_);
      return;
    }
    if (!closing_) return;
    finished_ = true;
    grpc::Status st = status_;
    lk.unlock();
    Finish(st);
  }

  AgentGateway& gw_;
  grpc::CallbackServerContext* ctx_;  // valid until OnDone
  std::mutex mu_;
  std::shared_ptr<Stream> self_;  // until OnDone
  v1::AgentMessage read_msg_;     // the read in flight
  v1::SchedulerMessage write_msg_;  // the write in flight
  std::deque<v1::AgentMessage> inbox_;
  std::deque<v1::SchedulerMessage> outbox_;
  grpc::Status status_;
  int64_t last_read_ = 0;
  size_t unacked_ = 0;    // applied, not yet completed
  bool waiting_ = false;  // the drain stopped at kMaxQueuedReads applied and not completed
  bool reading_ = false, reads_done_ = false, writing_ = false;
  bool registered_ = false;     // Registered is queued: writes may start
  bool register_seen_ = false;  // the first message went to a worker
  bool draining_ = false, busy_ = false;
  bool closing_ = false, finished_ = false, done_ = false, forgotten_ = false;
};

AgentGateway::AgentGateway(const Authenticator& a, const LeaderGate* gate, int workers) : auth_(a), gate_(gate) {
  for (int i = 0; i < std::max(1, workers); ++i) workers_.emplace_back([this] { WorkerLoop(); });
  completer_ = std::thread([this] { CompleterLoop(); });
}

AgentGateway::~AgentGateway() { Stop(); }

void AgentGateway::Stop() {
  {
    std::lock_guard lk(work_mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
  {
    std::lock_guard lk(done_mu_);
    completer_stopping_ = true;
  }
  done_cv_.notify_all();
  if (completer_.joinable()) completer_.join();
}

void AgentGateway::CompleterLoop() {
  std::unique_lock lk(done_mu_);
  while (true) {
    done_cv_.wait(lk, [&] { return completer_stopping_ || !completions_.empty(); });
    if (completions_.empty()) return;  // stopping, and everything applied was completed
    Completion c = std::move(completions_.front());
    completions_.pop_front();
    lk.unlock();
    try {
      ctl_->CompleteBatch(*c.batch);
      if (c.seq != 0) {
        // The report's effect is durable, and so is any earlier state whose write had failed (a
        // repeat of a report finds it already applied in memory).
        ctl_->FlushUnpersisted();
        v1::SchedulerMessage ack;
        ack.mutable_ack()->set_seq(c.seq);
        c.stream->Queue(std::move(ack));
      }
    } catch (const std::exception& e) {
      // A failing store (disk full, I/O error) ends this stream, never schedd: no ack, the agent
      // reconnects and sends the report again.
      spdlog::error("node {}: agent stream failed: {}; closing it", c.stream->node, e.what());
      ctl_->CountInternalError();
      c.stream->Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string("schedd could not handle the agent stream: ") + e.what()));
    }
    c.stream->Completed();
    c = Completion{};  // drops the stream and the batch without the lock
    lk.lock();
  }
}

void AgentGateway::Post(std::function<void()> work) {
  {
    std::lock_guard lk(work_mu_);
    work_.push_back(std::move(work));  // after Stop: never run, dropped with the gateway
  }
  work_cv_.notify_one();
}

void AgentGateway::WorkerLoop() {
  std::unique_lock lk(work_mu_);
  while (true) {
    work_cv_.wait(lk, [&] { return stopping_ || !work_.empty(); });
    if (work_.empty()) return;  // stopping, and everything queued was done
    auto work = std::move(work_.front());
    work_.pop_front();
    lk.unlock();
    work();
    work = nullptr;  // drops its stream reference without the lock
    lk.lock();
  }
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::SchedulerMessage>* AgentGateway::Connect(grpc::CallbackServerContext* ctx) {
  auto s = std::make_shared<Stream>(*this, ctx);
  Stream* raw = s.get();
  raw->Begin(std::move(s));
  return raw;
}

void AgentGateway::Register(const std::shared_ptr<Stream>& s, const v1::AgentMessage& first) {
  auto refuse = [&](grpc::StatusCode code, std::string why) { s->Close(grpc::Status(code, std::move(why))); };
  if (!first.has_register_() || first.register_().name().empty())
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "the first message on the agent stream must be register with a node name");
  if (std::string err = CheckRegistration(first.register_()); !err.empty()) {
    if (ctl_) ctl_->CountRejected("registration");
    return refuse(grpc::StatusCode::INVALID_ARGUMENT, "register: " + err);
  }
  const std::string node = first.register_().name();
  std::string identity, serial;
  bool declared_only = false;
  grpc::Status auth = grpc::Status::OK;
  if (!s->WithContext([&](grpc::CallbackServerContext* ctx) {
        auth = auth_.AuthenticateAgent(ctx, node, &identity, &declared_only);
        serial = auth_.PeerSerial(ctx);
      }))
    return;  // the call ended meanwhile
  if (!auth.ok()) return refuse(auth.error_code(), auth.error_message());
  const InventoryVerdict verdict = ctl_->AdmitNode(first.register_(), declared_only);
  if (!verdict.error.empty()) {
    ctl_->CountRejected("registration");
    spdlog::warn("node {}: registration by {} refused: {}", node, identity, verdict.error);
    return refuse(grpc::StatusCode::PERMISSION_DENIED, "register: " + verdict.error);
  }
  if (!verdict.clamped.empty())
    spdlog::warn("node {}: registration clamped to the node inventory: {}", node, verdict.clamped);
  s->node = node;
  s->serial = serial;
  std::shared_ptr<Stream> old;
  {
    std::lock_guard lk(mu_);
    old = std::exchange(sessions_[node], s);
  }
  if (old) {
    // The node's previous stream is closed, so no agent is left orphaned on it.
    spdlog::warn("node {}: a new agent session ({}) replaces the previous one", node, identity);
    old->Close(grpc::Status(grpc::StatusCode::CANCELLED, "replaced by a newer stream of the same node"));
    old->Cancel();
  }
  // Registered must be the first message the agent sees (QueueRegistered puts it in front of
  // anything the Controller queued for the node meanwhile).
  v1::SchedulerMessage registered;
  *registered.mutable_registered() = ctl_->OnRegister(verdict.admitted, WallNow());
  s->QueueRegistered(std::move(registered));
}

bool AgentGateway::Handle(const std::shared_ptr<Stream>& s, const v1::AgentMessage& msg) {
  if (auth_.SerialRevoked(s->serial)) {
    spdlog::warn("node {}: its agent's certificate (serial {}) was revoked; closing the stream", s->node, s->serial);
    return false;
  }
  if (msg.seq() != 0 && CrashBeforeReport()) ::kill(::getpid(), SIGKILL);
  // Throws when the store fails to take a write: no ack then. keep false: the node is DOWN (its
  // tasks were requeued); closing the stream makes the agent register again, which reconciles
  // what still runs there.
  Controller::AppliedMessage applied = ctl_->ApplyAgentMessage(s->node, msg, WallNow());
  if (usage_ && msg.has_heartbeat() && applied.keep) usage_->Observe(s->node, msg.heartbeat(), std::chrono::steady_clock::now());
  // Most heartbeats write and send nothing: nothing to complete, no hand-off to the completer
  // (one thread wake-up and a Controller lock fewer per heartbeat; 2,000 a second at 10,000 nodes).
  const bool nothing = msg.seq() == 0 && (!applied.batch || (applied.batch->writes.empty() && applied.batch->sends.empty()));
  if (!nothing) {
    s->Applied();
    {
      std::lock_guard lk(done_mu_);
      completions_.push_back(Completion{s, msg.seq(), std::move(applied.batch)});
    }
    done_cv_.notify_one();
  }
  if (!applied.keep)
    spdlog::warn("node {}: a message from a node marked DOWN; closing its stream so that it registers again", s->node);
  return applied.keep;
}

size_t AgentGateway::CloseStreams(const grpc::Status& status) {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    std::lock_guard lk(mu_);
    closed_status_ = status;
    closed_ = true;
    for (const auto& [node, s] : sessions_) streams.push_back(s);
  }
  for (const auto& s : streams) s->Close(status);
  return streams.size();
}

void AgentGateway::Forget(Stream& s) {
  if (s.node.empty()) return;  // never registered
  bool current = false;
  {
    std::lock_guard lk(mu_);
    auto it = sessions_.find(s.node);
    if (it != sessions_.end() && it->second.get() == &s) {
      sessions_.erase(it);
      current = true;
    }
  }
  if (current && usage_) usage_->ForgetNode(s.node);
  if (current && ctl_) ctl_->OnDisconnect(s.node, WallNow());
}

bool AgentGateway::Send(const std::string& node, v1::SchedulerMessage msg) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard lk(mu_);
    auto it = sessions_.find(node);
    if (it == sessions_.end()) return false;
    s = it->second;
  }
  return s->Queue(std::move(msg));
}

int64_t AgentGateway::LastHeard(const std::string& node, int64_t now) {
  std::shared_ptr<Stream> s;
  {
    std::lock_guard lk(mu_);
    auto it = sessions_.find(node);
    if (it == sessions_.end()) return 0;
    s = it->second;
  }
  return s->LastHeard(now);
}

}  // namespace mlsched::server
