#include "agentd/session_host.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "agentd/container_tools.h"
#include "common/session_checks.h"

namespace mlsched::agent {

struct SessionHost::Live {
  std::string id;
  grpc::ClientContext ctx;
  std::atomic<pid_t> pgid{0};
  std::atomic<int64_t> kill_at_ms{0};  // steady-clock ms at which what is left gets SIGKILL; 0 = none
  std::atomic<bool> exited{false};
};

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Descriptors of one session: the parent's ends and the child's.
struct SessionFds {
  int master = -1;                  // pty
  int in = -1, out = -1, err = -1;  // pipes: the parent's ends
  std::array<int, 3> child = {-1, -1, -1};
  ~SessionFds() {
    for (int fd : {master, in, out, err}) if (fd >= 0) close(fd);
    CloseChild();
  }
  void CloseChild() {
    if (child[0] >= 0) close(child[0]);
    if (child[1] >= 0 && child[1] != child[0]) close(child[1]);
    if (child[2] >= 0 && child[2] != child[0]) close(child[2]);
    child = {-1, -1, -1};
  }
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The task's cgroup.procs in `dir` (a directory agentd made), open for the child to join.
int OpenCgroupProcs(const std::string& dir) { return ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC); }

// A pty whose slave is owned by `uid` (group tty, mode 0620, as login and sshd make it), reached
// through the master (TIOCGPTPEER), never by its /dev/pts path.
std::string MakePty(uid_t uid, const v1::SessionOpen& open, SessionFds* fds) {
  fds->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fds->master < 0) return Errno("posix_openpt");
  if (unlockpt(fds->master) != 0) return Errno("unlockpt");
  const int slave = ioctl(fds->master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) return Errno("open the pty's slave");
  fds->child = {slave, slave, slave};
  struct group* tty = getgrnam("tty");
  if (fchown(slave, uid, tty ? tty->gr_gid : static_cast<gid_t>(-1)) != 0 || fchmod(slave, 0620) != 0)
    return Errno("give the pty to the user");
  if (open.has_window()) {
    struct winsize ws{};
    ws.ws_row = static_cast<unsigned short>(open.window().rows());
    ws.ws_col = static_cast<unsigned short>(open.window().cols());
    ioctl(fds->master, TIOCSWINSZ, &ws);
  }
  return "";
}

std::string MakePipes(SessionFds* fds) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0) return Errno("pipe");
  fds->in = in[1];
  fds->child[0] = in[0];
  if (pipe2(out, O_CLOEXEC) != 0) return Errno("pipe");
  fds->out = out[0];
  fds->child[1] = out[1];
  if (pipe2(err, O_CLOEXEC) != 0) return Errno("pipe");
  fds->err = err[0];
  fds->child[2] = err[1];
  return "";
}

std::string EnvValue(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size() + 1, name + "=") == 0) return kv.substr(name.size() + 1);
  return "";
}

// The session's launch request: the task's, with the session's command and descriptors.
LaunchRequest SessionRequest(const LaunchRequest& task, const v1::SessionOpen& open, const SessionFds& fds) {
  LaunchRequest r = task;
  r.argv.assign(open.argv().begin(), open.argv().end());
  r.executable = r.argv[0];
  r.search_path = r.executable.find('/') == std::string::npos ? EnvValue(r.env, "PATH") : "";
  if (r.executable.find('/') == std::string::npos && r.search_path.empty()) r.search_path = "/usr/local/bin:/usr/bin:/bin";
  r.stdout_path.clear();
  r.stderr_path.clear();
  r.inherit_fd.reset();
  r.stdio = fds.child;
  r.controlling_tty = open.pty();
  for (const auto& kv : open.env()) {  // checked: NAME=VALUE (CheckSessionOpen)
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(r.env, [&](const std::string& have) { return have.rfind(name, 0) == 0; });
    r.env.push_back(kv);
  }
  if (open.pty()) {
    std::erase_if(r.env, [](const std::string& kv) { return kv.rfind("TERM=", 0) == 0; });
    r.env.push_back("TERM=" + (open.term().empty() ? std::string("xterm") : open.term()));
  }
  return r;
}

// Writes all of `data` to `fd` (non-blocking: waits in poll, giving up once `exited`).
void WriteAll(int fd, const std::string& data, const std::atomic<bool>& exited) {
  size_t off = 0;
  while (off < data.size() && fd >= 0) {
    const ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && errno == EAGAIN) {
      if (exited) return;
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 200);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // the reader is gone
    }
  }
}

v1::SessionFrame ExitFrame(int code, bool signaled, const std::string& error, const struct rusage* usage = nullptr) {
  v1::SessionFrame f;
  auto* e = f.mutable_output()->mutable_exit();
  e->set_exit_code(code);
  e->set_signaled(signaled);
  e->set_error(error);
  if (usage) {  // the process and the descendants it waited for (ru_maxrss: KiB on Linux)
    auto usec = [](const timeval& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000 + t.tv_usec; };
    e->set_cpu_usec(usec(usage->ru_utime) + usec(usage->ru_stime));
    e->set_max_rss_bytes(static_cast<int64_t>(usage->ru_maxrss) * 1024);
  }
  return f;
}

}  // namespace

SessionHost::~SessionHost() { Stop(); }

size_t SessionHost::Running() {
  std::lock_guard lk(mu_);
  return live_.size();
}

void SessionHost::Stop() {
  std::unique_lock lk(mu_);
  stopping_ = true;
  for (auto& [id, l] : live_) {
    if (pid_t g = l->pgid.load(); g > 0) kill(-g, SIGHUP);
    l->kill_at_ms = NowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(kHangupGrace).count();
    l->ctx.TryCancel();
  }
  cv_.wait(lk, [&] { return live_.empty(); });
}

void SessionHost::Open(const v1::OpenSession& msg) {
  auto live = std::make_shared<Live>();
  live->id = msg.session_id();
  {
    std::lock_guard lk(mu_);
    if (stopping_ || live_.count(live->id)) return;
    if (live_.size() >= kMaxSessions) {
      spdlog::warn("session {}: refused: {} sessions run on this node", live->id.substr(0, 8), live_.size());
      // Still answered on a relay stream, so the client hears why.
    }
    live_[live->id] = live;
  }
  std::thread([this, live, msg] {
    Run(live, msg);
    std::lock_guard lk(mu_);
    live_.erase(live->id);
    cv_.notify_all();
  }).detach();
}

void SessionHost::Run(std::shared_ptr<Live> live, v1::OpenSession msg) {
  std::string server;
  auto channel = channel_(&server);
  const std::string tag = "session " + live->id.substr(0, 8);
  if (!channel) {
    spdlog::warn("{}: no channel to schedd", tag);
    return;
  }
  auto stub = v1::AgentSessionService::NewStub(channel);
  auto stream = stub->Relay(&live->ctx);
  v1::SessionFrame hello;
  hello.set_session_id(msg.session_id());
  hello.set_token(msg.token());
  auto finish = [&](const v1::SessionFrame* last) {
    if (last) stream->Write(*last);
    stream->WritesDone();
    v1::SessionInput ignored;
    while (stream->Read(&ignored)) {
    }
    grpc::Status st = stream->Finish();
    if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED)
      spdlog::warn("{}: relay stream to {} ended: {}", tag, server, st.error_message());
  };
  if (!stream->Write(hello)) return finish(nullptr);
  const v1::SessionOpen& open = msg.open();
  const TaskKey key{msg.job_id(), msg.attempt(), open.rank()};
  auto refuse = [&](const std::string& why) {
    spdlog::info("{}: job {} rank {}: refused: {}", tag, key.job_id, key.rank, why);
    auto f = ExitFrame(255, false, why);
    finish(&f);
  };
  if (auto err = CheckSessionOpen(open); !err.empty()) return refuse(err);
  if (Running() > kMaxSessions) return refuse(std::to_string(kMaxSessions) + " sessions run on node " + node_);
  auto task = find_task_(key);
  if (!task)
    return refuse("job " + std::to_string(key.job_id) + " rank " + std::to_string(key.rank) + " (attempt " +
                  std::to_string(key.attempt) + ") does not run on node " + node_);
  const bool in_image = task->request.container != nullptr;

  SessionFds fds;
  // In an image runc holds the pty (root's, nobody's controlling terminal) and makes the user's
  // own terminal inside the container.
  std::string err = open.pty() ? MakePty(in_image ? 0 : task->request.uid, open, &fds) : MakePipes(&fds);
  if (!err.empty()) return refuse(err);
  std::vector<int> cgroup_fds;
  for (const auto& dir : task->cgroup_dirs) {
    const int fd = OpenCgroupProcs(dir);
    if (fd < 0) {
      for (int f : cgroup_fds) close(f);
      return refuse(Errno("join the task's cgroup " + dir));
    }
    cgroup_fds.push_back(fd);
  }
  ExecRequest want{SessionRequest(task->request, open, fds), open.pty(), open.window().rows(), open.window().cols(),
                   {open.env().begin(), open.env().end()}};
  if (open.pty()) want.env.push_back("TERM=" + (open.term().empty() ? std::string("xterm") : open.term()));
  ExecPlan plan;
  if (auto e = exec_(key, std::move(want), &plan); !e.empty()) {
    for (int f : cgroup_fds) close(f);
    return refuse(e);
  }
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() {
      if (fn) fn();
    }
  } cleanup{plan.cleanup};  // after the process was reaped (the out thread joined below)
  const LaunchRequest& req = plan.request;
  ExitReport failure;
  const pid_t pid = SpawnRegistered([&] {
    SpawnResult r = SpawnTask(req, cgroup_fds);
    failure = r.failure;
    return r.pid;
  });
  for (int f : cgroup_fds) close(f);
  fds.CloseChild();
  if (pid <= 0) return refuse(failure.error.empty() ? "the command did not start" : failure.error);
  live->pgid = pid;
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  spdlog::info("{}: job {} rank {}: pid {} runs {}{} as uid {}", tag, key.job_id, key.rank, pid, req.executable,
               open.pty() ? " on a pty" : "", req.uid);
  for (int fd : {fds.master, fds.in, fds.out, fds.err})
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  v1::SessionFrame started;
  started.mutable_output()->set_started(node_);
  stream->Write(started);

  // Output, the exit and the hang-up deadline, on a thread of its own (the only writer).
  std::thread out([&] {
    std::vector<pollfd> polls;
    if (fds.master >= 0) polls.push_back({fds.master, POLLIN, 0});
    if (fds.out >= 0) polls.push_back({fds.out, POLLIN, 0});
    if (fds.err >= 0) polls.push_back({fds.err, POLLIN, 0});
    polls.push_back({pidfd, POLLIN, 0});
    std::vector<char> buf(32 * 1024);
    bool streaming = true, exited = pidfd < 0;
    auto drain = [&](pollfd& p) {  // reads what `p` holds now; false at its end
      for (;;) {
        const ssize_t n = read(p.fd, buf.data(), buf.size());
        if (n > 0) {
          v1::SessionFrame f;
          auto* o = f.mutable_output();
          (p.fd == fds.err ? o->mutable_stderr() : o->mutable_stdout())->assign(buf.data(), static_cast<size_t>(n));
          if (streaming && !stream->Write(f)) {
            streaming = false;  // schedd or the client is gone: hang up
            kill(-pid, SIGHUP);
            live->kill_at_ms = NowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(kHangupGrace).count();
          }
          if (!streaming || static_cast<size_t>(n) < buf.size()) return true;  // let the others have a turn
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
        p.fd = -1;  // EOF, or EIO: the pty's last slave closed
        return false;
      }
    };
    while (!exited) {
      poll(polls.data(), polls.size(), 200);
      for (size_t i = 0; i + 1 < polls.size(); ++i)
        if (polls[i].fd >= 0 && polls[i].revents) drain(polls[i]);
      if (pidfd >= 0 && polls.back().revents) exited = true;
      const int64_t k = live->kill_at_ms;
      if (k && NowMs() >= k) kill(-pid, SIGKILL);
    }
    live->exited = true;
    for (size_t i = 0; i + 1 < polls.size(); ++i)
      if (polls[i].fd >= 0) drain(polls[i]);
    struct rusage usage {};
    const ExitReport r = DecodeWaitStatus(WaitHelper(pid, &usage));
    kill(-pid, SIGHUP);  // what is left of its session
    live->pgid = 0;
    spdlog::info("{}: pid {} exited {}", tag, pid, r.exit_code);
    if (streaming) stream->Write(ExitFrame(r.exit_code, r.signaled, "", &usage));
    stream->WritesDone();
  });

  // Input, on this thread, until schedd ends the stream.
  v1::SessionInput in;
  while (stream->Read(&in)) {
    if (auto bad = CheckSessionInput(in); !bad.empty()) {
      spdlog::warn("{}: input refused: {}", tag, bad);
      continue;
    }
    const int to = fds.master >= 0 ? fds.master : fds.in;
    switch (in.msg_case()) {
      case v1::SessionInput::kData: WriteAll(to, in.data(), live->exited); break;
      case v1::SessionInput::kEof:
        if (fds.master >= 0) {
          struct termios t{};
          const char eof = tcgetattr(fds.master, &t) == 0 ? static_cast<char>(t.c_cc[VEOF]) : '\x04';
          WriteAll(fds.master, std::string(1, eof), live->exited);
        } else if (fds.in >= 0) {
          close(fds.in);
          fds.in = -1;
        }
        break;
      case v1::SessionInput::kResize:
        if (fds.master >= 0) {
          struct winsize ws{};
          ws.ws_row = static_cast<unsigned short>(in.resize().rows());
          ws.ws_col = static_cast<unsigned short>(in.resize().cols());
          ioctl(fds.master, TIOCSWINSZ, &ws);  // the kernel sends SIGWINCH to the foreground group
          // runc's pty is no one's controlling terminal: runc is told, and resizes the container's.
          if (in_image && !live->exited) kill(pid, SIGWINCH);
        }
        break;
      case v1::SessionInput::kSignal:
        if (!live->exited) kill(-pid, in.signal());
        if (in.signal() == SIGHUP)
          live->kill_at_ms = NowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(kHangupGrace).count();
        break;
      default: break;
    }
  }
  if (!live->exited) {  // the stream ended first: hang up, then kill what is left
    kill(-pid, SIGHUP);
    if (!live->kill_at_ms)
      live->kill_at_ms = NowMs() + std::chrono::duration_cast<std::chrono::milliseconds>(kHangupGrace).count();
  }
  out.join();
  if (pidfd >= 0) close(pidfd);
  grpc::Status st = stream->Finish();
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED)
    spdlog::info("{}: relay stream to {} ended: {}", tag, server, st.error_message());
}

}  // namespace mlsched::agent
