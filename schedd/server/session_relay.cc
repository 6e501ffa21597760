#include "schedd/server/session_relay.h"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <thread>

#include "common/session_checks.h"
#include "schedd/server/rendezvous_token.h"

namespace mlsched::server {

// One session: the two streams and who may write to each. A stream is written by the other
// direction's thread only while its own handler is still inside ServeClient/ServeAgent
// (`*_open`); a handler leaving clears it and waits out a write in flight.
struct SessionRelay::Session {
  std::string id, token, node;
  int64_t job_id = 0;
  int32_t rank = 0;
  int32_t step_id = -1, step_task = 0;  // the step it is a task of (-1: none recorded)
  uint32_t uid = 0;
  std::string user;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  std::mutex mu;
  std::condition_variable cv;
  ClientStream* client = nullptr;  // set while ServeClient runs
  AgentStream* agent = nullptr;    // set while ServeAgent runs
  grpc::ServerContext* agent_ctx = nullptr;
  bool attached = false;           // the agent's stream arrived
  bool agent_done = false;         // ServeAgent ended (after the exit went to the client)
  int writing_client = 0, writing_agent = 0;
  uint64_t bytes_out = 0, bytes_in = 0;
  std::atomic<int64_t> last_io_ns{0};  // steady clock of the last data relayed; 0 = none
  std::optional<v1::SessionExit> exit;   // the agent's report (set by ServeAgent)

  void Touch() { last_io_ns = std::chrono::steady_clock::now().time_since_epoch().count(); }

  // A message to the client; false once the client is gone.
  bool ToClient(const v1::SessionOutput& out) {
    std::unique_lock lk(mu);
    if (!client) return false;
    ++writing_client;
    ClientStream* s = client;
    lk.unlock();
    const bool ok = s->Write(out);
    lk.lock();
    --writing_client;
    cv.notify_all();
    return ok;
  }
  bool ToAgent(const v1::SessionInput& in) {
    std::unique_lock lk(mu);
    if (!agent) return false;
    ++writing_agent;
    AgentStream* s = agent;
    lk.unlock();
    const bool ok = s->Write(in);
    lk.lock();
    --writing_agent;
    cv.notify_all();
    return ok;
  }
};

namespace {

// Runs `pump` on a thread of its own at a lower CPU priority (nice +10 over schedd's), so a
// terminal streaming at full speed yields schedd's CPU to scheduling and the other RPCs. A thread
// of its own because gRPC's server threads are pooled and an unprivileged schedd could not raise
// a thread's priority back (Linux: setpriority on a thread id).
template <typename F>
void RelayAtLowPriority(F&& pump) {
  std::thread t([&] {
    errno = 0;
    const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
    const int now = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(19, now + 10));
    pump();
  });
  t.join();
}

v1::SessionOutput ExitWithError(const std::string& error) {
  v1::SessionOutput out;
  out.mutable_exit()->set_exit_code(255);
  out.mutable_exit()->set_error(error);
  return out;
}

v1::SessionInput SignalInput(int signal) {
  v1::SessionInput in;
  in.set_signal(signal);
  return in;
}

}  // namespace

void SessionRelay::Throttle(size_t bytes) {
  if (limits_.bytes_per_second <= 0 || bytes == 0) return;
  const double rate = static_cast<double>(limits_.bytes_per_second), burst = rate / 10;
  std::chrono::duration<double> wait{0};
  {
    std::lock_guard lk(bucket_mu_);
    const auto now = std::chrono::steady_clock::now();
    tokens_ = std::min(burst, tokens_ + rate * std::chrono::duration<double>(now - refilled_).count());
    refilled_ = now;
    tokens_ -= static_cast<double>(bytes);  // may go negative: the debt is this caller's wait
    if (tokens_ < 0) wait = std::chrono::duration<double>(-tokens_ / rate);
  }
  if (wait.count() > 0) std::this_thread::sleep_for(wait);
}

size_t SessionRelay::Open() {
  std::lock_guard lk(mu_);
  return sessions_.size();
}

grpc::Status SessionRelay::Start(const v1::SessionOpen& open, const Caller& caller, std::shared_ptr<Session>* out) {
  if (auto err = CheckSessionOpen(open); !err.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, err};
  const std::string job = "job " + std::to_string(open.job_id());
  v1::JobInfo info;
  if (auto st = ctl_.Get(caller, open.job_id(), &info); !st.ok()) return {grpc::StatusCode::NOT_FOUND, job + " is unknown"};
  if (!MaySeeDetails(caller, info.uid(), info.user()))
    return {grpc::StatusCode::PERMISSION_DENIED, job + " belongs to " + info.user() + ": only its owner or an operator may open a session in it"};
  if (info.state() != v1::RUNNING)
    return {grpc::StatusCode::FAILED_PRECONDITION, job + " is " + v1::JobState_Name(info.state()) + ", not running"};
  if (!open.overlap())
    return {grpc::StatusCode::FAILED_PRECONDITION,
            job + " is running: a session in it shares its tasks' resources; ask for that with --overlap (as srun)"};
  const v1::TaskPlacement* task = nullptr;
  for (const auto& t : info.tasks())
    if (t.rank() == open.rank()) task = &t;
  if (!task)
    return {grpc::StatusCode::INVALID_ARGUMENT,
            job + " has no rank " + std::to_string(open.rank()) + " (world size " + std::to_string(info.tasks_size()) + ")"};
  auto s = std::make_shared<Session>();
  s->id = NewRendezvousToken().substr(0, 32);
  s->token = NewRendezvousToken();
  s->node = task->node();
  s->job_id = open.job_id();
  s->rank = open.rank();
  s->uid = caller.uid;
  s->user = caller.user;
  {
    std::lock_guard lk(mu_);
    if (sessions_.size() >= limits_.max_total)
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, std::to_string(limits_.max_total) + " sessions are open on this schedd"};
    if (per_user_[caller.uid] >= limits_.max_per_user)
      return {grpc::StatusCode::RESOURCE_EXHAUSTED,
              caller.user + " holds " + std::to_string(limits_.max_per_user) + " sessions already (the limit per user)"};
    ++per_user_[caller.uid];
    sessions_[s->id] = s;
  }
  if (steps_) {  // every session is a step's task: of the step it names, or of a one-task step of its own
    int32_t step = open.has_step_id() ? open.step_id() : -1;
    grpc::Status st;
    if (step < 0) st = steps_->Start(info, caller, 1, open.argv(0), &step);
    if (st.ok()) st = steps_->Join(open.job_id(), step, open.step_task(), caller, s->node);
    if (!st.ok()) {
      if (step >= 0 && !open.has_step_id()) steps_->TaskEnded(open.job_id(), step, 0, 255, false, st.error_message());
      Forget(s);
      return st;
    }
    s->step_id = step;
    s->step_task = open.step_task();
  }
  v1::SchedulerMessage msg;
  auto* o = msg.mutable_open_session();
  o->set_session_id(s->id);
  o->set_token(s->token);
  o->set_job_id(open.job_id());
  o->set_attempt(info.attempt());
  *o->mutable_open() = open;
  if (!agents_.Send(s->node, std::move(msg))) {
    EndStepTask(*s, "node " + s->node + " is not connected");
    Forget(s);
    return {grpc::StatusCode::UNAVAILABLE, "node " + s->node + " of " + job + " is not connected"};
  }
  *out = std::move(s);
  return grpc::Status::OK;
}

void SessionRelay::Forget(const std::shared_ptr<Session>& s) {
  std::lock_guard lk(mu_);
  if (sessions_.erase(s->id) && --per_user_[s->uid] == 0) per_user_.erase(s->uid);
  if (const int64_t ns = s->last_io_ns.load(); ns != 0) {
    const std::chrono::steady_clock::time_point at{std::chrono::steady_clock::duration(ns)};
    auto& last = ended_io_[s->job_id];
    last = std::max(last, at);
    const auto day_ago = std::chrono::steady_clock::now() - std::chrono::hours(24);
    std::erase_if(ended_io_, [&](const auto& e) { return e.second < day_ago; });
  }
}

std::optional<std::chrono::steady_clock::time_point> SessionRelay::LastActivity(int64_t job_id) {
  std::lock_guard lk(mu_);
  std::optional<std::chrono::steady_clock::time_point> last;
  if (auto it = ended_io_.find(job_id); it != ended_io_.end()) last = it->second;
  for (const auto& [id, s] : sessions_) {
    const int64_t ns = s->last_io_ns.load();
    if (s->job_id != job_id || ns == 0) continue;
    const std::chrono::steady_clock::time_point at{std::chrono::steady_clock::duration(ns)};
    if (!last || at > *last) last = at;
  }
  return last;
}

void SessionRelay::EndStepTask(Session& s, const std::string& why_no_exit) {
  if (!steps_ || s.step_id < 0) return;
  std::optional<v1::SessionExit> exit;
  {
    std::lock_guard lk(s.mu);
    exit = s.exit;
  }
  if (exit)
    steps_->TaskEnded(s.job_id, s.step_id, s.step_task, exit->exit_code(), exit->signaled(), exit->error(),
                      exit->has_cpu_usec() ? exit->cpu_usec() : -1, exit->has_max_rss_bytes() ? exit->max_rss_bytes() : -1);
  else steps_->TaskEnded(s.job_id, s.step_id, s.step_task, 255, false, why_no_exit);
}

grpc::Status SessionRelay::ServeClient(grpc::ServerContext* ctx, ClientStream* stream, const Caller& caller) {
  v1::SessionInput first;
  if (!stream->Read(&first)) return {grpc::StatusCode::CANCELLED, "the client left before opening a session"};
  if (!first.has_open()) return {grpc::StatusCode::INVALID_ARGUMENT, "the first message of a session must open it"};
  std::shared_ptr<Session> s;
  if (auto st = Start(first.open(), caller, &s); !st.ok()) return st;
  {
    std::unique_lock lk(s->mu);
    s->client = stream;
    const bool attached = s->cv.wait_for(lk, limits_.attach_timeout, [&] { return s->attached || ctx->IsCancelled(); });
    if (!attached || !s->attached) {
      s->client = nullptr;
      lk.unlock();
      EndStepTask(*s, "node " + s->node + " did not start it");
      Forget(s);
      return {grpc::StatusCode::UNAVAILABLE, "node " + s->node + " did not start the session within " +
                                                 std::to_string(limits_.attach_timeout.count() / 1000) + " s"};
    }
  }
  spdlog::info("session {}: {} opened job {} rank {} on {}", s->id.substr(0, 8), s->user, s->job_id, s->rank, s->node);
  // Client -> agent until the client closes its side or goes away.
  std::string refused;
  RelayAtLowPriority([&] {
    v1::SessionInput in;
    while (stream->Read(&in)) {
      if (refused = CheckSessionInput(in); !refused.empty()) break;
      if (in.has_data()) {
        s->Touch();
        s->bytes_in += in.data().size();
        if (metrics_) metrics_->CountSessionBytes("in", static_cast<double>(in.data().size()));
        Throttle(in.data().size());
      }
      if (!s->ToAgent(in)) break;
    }
  });
  std::unique_lock lk(s->mu);
  if (!s->agent_done) {
    // The client left (or broke a rule) before the process ended: hang it up, then wait for the
    // agent's exit report; a node that does not answer is cut off.
    lk.unlock();
    s->ToAgent(SignalInput(SIGHUP));
    lk.lock();
    if (!s->cv.wait_for(lk, limits_.hangup_grace, [&] { return s->agent_done; })) {
      if (s->agent_ctx) s->agent_ctx->TryCancel();
      s->cv.wait(lk, [&] { return s->agent_done; });
    }
  }
  s->client = nullptr;
  s->cv.wait(lk, [&] { return s->writing_client == 0; });
  lk.unlock();
  EndStepTask(*s, std::string(kSessionLostPrefix) + "the stream from node " + s->node + " ended before its process did");
  Forget(s);
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - s->started).count();
  spdlog::info("session {}: closed after {} s ({} bytes out, {} in){}", s->id.substr(0, 8), secs, s->bytes_out, s->bytes_in,
               refused.empty() ? "" : "; refused input: " + refused);
  if (!refused.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, refused};
  return grpc::Status::OK;
}

grpc::Status SessionRelay::ServeAgent(grpc::ServerContext* ctx, AgentStream* stream, const Authenticator& auth) {
  v1::SessionFrame first;
  if (!stream->Read(&first)) return {grpc::StatusCode::CANCELLED, "no session named"};
  std::shared_ptr<Session> s;
  {
    std::lock_guard lk(mu_);
    auto it = sessions_.find(first.session_id());
    if (it != sessions_.end()) s = it->second;
  }
  // The same answer for an unknown id and a wrong token: neither tells a guesser anything.
  if (!s || first.token().size() != s->token.size() ||
      CRYPTO_memcmp(first.token().data(), s->token.data(), s->token.size()) != 0)
    return {grpc::StatusCode::PERMISSION_DENIED, "no such session"};
  std::string identity;
  bool declared_only = false;
  if (auto st = auth.AuthenticateAgent(ctx, s->node, &identity, &declared_only); !st.ok()) {
    spdlog::warn("session {}: a relay stream that is not node {}'s was refused: {}", s->id.substr(0, 8), s->node,
                 st.error_message());
    return st;
  }
  {
    std::lock_guard lk(s->mu);
    if (s->attached || !s->client) return {grpc::StatusCode::FAILED_PRECONDITION, "the session is attached or over"};
    s->agent = stream;
    s->agent_ctx = ctx;
    s->attached = true;
  }
  s->cv.notify_all();
  // Agent -> client until the agent ends its side.
  bool exited = false;
  RelayAtLowPriority([&] {
    v1::SessionFrame frame;
    while (!exited && stream->Read(&frame)) {
      v1::SessionOutput& out = *frame.mutable_output();
      if (out.has_stdout() && out.stdout().size() > kMaxSessionChunk) out.mutable_stdout()->resize(kMaxSessionChunk);
      if (out.has_stderr() && out.stderr().size() > kMaxSessionChunk) out.mutable_stderr()->resize(kMaxSessionChunk);
      if (out.has_exit()) {
        exited = true;
        std::lock_guard lk(s->mu);
        s->exit = out.exit();
      }
      if (out.msg_case() == v1::SessionOutput::MSG_NOT_SET) continue;
      const size_t n = out.stdout().size() + out.stderr().size();
      if (n > 0) s->Touch();
      s->bytes_out += n;
      if (metrics_) metrics_->CountSessionBytes("out", static_cast<double>(n));
      Throttle(n);
      s->ToClient(out);  // a client that left drops it; the hang-up is on its way
    }
  });
  if (!exited)
    s->ToClient(ExitWithError(std::string(kSessionLostPrefix) + "the stream from node " + s->node +
                              " ended before its process did (agentd restarted or lost schedd)"));
  std::unique_lock lk(s->mu);
  s->agent = nullptr;
  s->agent_ctx = nullptr;
  if (s->writing_agent) ctx->TryCancel();  // a write the agent will never read
  s->cv.wait(lk, [&] { return s->writing_agent == 0; });
  s->agent_done = true;
  s->cv.notify_all();
  return grpc::Status::OK;
}

}  // namespace mlsched::server
