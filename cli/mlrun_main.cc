// mlrun: run a command in a running job, on the node of one of its ranks, in that rank's cgroup,
// as its user with its environment (srun --jobid N --overlap [--pty]). Its output comes back live,
// its input goes to it; with --pty it gets a terminal (a shell, a debugger, nvidia-smi, py-spy).
// The session travels on the authenticated channel to schedd (proto/mlsched/v1/session.proto).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/exit_codes.h"
#include "cli/rpc.h"
#include "cli/terminal.h"
#include "common/session_checks.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

/// mlrun's own failures beside the remote command's exit status (which it otherwise returns).
constexpr int kExitSessionLost = 255;  // the node's stream ended before the command did

struct RunArgs {
  int64_t job_id = 0;
  int32_t rank = 0;
  bool overlap = false, pty = false, label = false;
  std::string server;
};

void AddOptions(CLI::App& app, RunArgs& a) {
  app.set_help_flag("--help", "print this help");
  app.add_option("--jobid", a.job_id, "the running job to run in (default: $MLSCHED_JOB_ID, inside a job)");
  app.add_option("--rank", a.rank, "the rank whose node, cgroup and environment the command joins (default 0)");
  app.add_flag("--overlap", a.overlap, "share the job's resources with its running tasks (srun --overlap; required)");
  app.add_flag("--pty", a.pty, "give the command a terminal (a shell, a debugger); your terminal goes raw meanwhile");
  app.add_flag("-l,--label", a.label, "prefix each output line with the rank (srun -l)");
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (default: $MLSCHED_SERVER)");
  app.prefix_command();  // options end at the command: `mlrun --jobid 3 --overlap ls -l`
  app.footer(
      "Usage: mlrun [--jobid N] [--rank R] --overlap [--pty] [-l] COMMAND [ARGS...]\n"
      "Without --pty, Ctrl-C sends SIGINT to the command; twice within a second kills it. With --pty every\n"
      "key goes to the remote terminal (Ctrl-C interrupts the remote foreground process).\n"
      "mlrun exits with the command's status (128 + N when signal N ended it). Its own failures:\n"
      "  1  refused (unknown job, not running, another user's job, no such rank, limits)\n"
      "  2  usage error\n"
      "  3  schedd unreachable\n"
      "  255  the session broke (the node's agent or schedd went away) before the command ended\n"
      "Starting a new job from mlrun (srun without an allocation) and mlalloc are not built yet: submit with\n"
      "mlsub, then run in it with mlrun --jobid N --overlap.");
}

// Writes all of `data` to `fd`.
void WriteFd(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// The session's one writer: stdin, signal and resize messages share the stream.
class Sender {
 public:
  explicit Sender(SessionStream& s) : s_(s) {}
  bool Send(const v1::SessionInput& in) {
    std::lock_guard lk(mu_);
    return !done_ && s_.Write(in);
  }
  void Done() {
    std::lock_guard lk(mu_);
    if (!done_) s_.WritesDone();
    done_ = true;
  }

 private:
  SessionStream& s_;
  std::mutex mu_;
  bool done_ = false;
};

void SendSignal(Sender& out, int signal) {
  v1::SessionInput in;
  in.set_signal(signal);
  out.Send(in);
}

// stdin -> the session, 32 KiB at a time; EOF is sent once.
void PumpStdin(Sender& out) {
  std::string buf(32 * 1024, '\0');
  for (;;) {
    const ssize_t n = read(0, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    v1::SessionInput in;
    in.set_data(buf.data(), static_cast<size_t>(n));
    if (!out.Send(in)) return;
  }
  v1::SessionInput eof;
  eof.set_eof(true);
  out.Send(eof);
}

// The signals mlrun handles, blocked in every thread and taken by SignalLoop.
sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, s);
  return set;
}

void SignalLoop(Sender& out, bool pty, RawTerminal& term) {
  const sigset_t set = HandledSignals();
  auto last_int = std::chrono::steady_clock::time_point{};
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGWINCH) {
      uint32_t rows = 0, cols = 0;
      if (pty && WindowSizeOf(0, &rows, &cols)) {
        v1::SessionInput in;
        in.mutable_resize()->set_rows(std::min(rows, kMaxWindowCells));
        in.mutable_resize()->set_cols(std::min(cols, kMaxWindowCells));
        out.Send(in);
      }
    } else if (sig == SIGINT) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_int < std::chrono::seconds(1)) {
        term.Restore();
        std::cerr << "mlrun: interrupted twice: killing the command\n";
        SendSignal(out, SIGKILL);
      } else {
        SendSignal(out, SIGINT);
      }
      last_int = now;
    } else if (sig == SIGQUIT) {
      SendSignal(out, SIGQUIT);
    } else {  // SIGTERM, SIGHUP: mlrun is going away; the command is hung up
      SendSignal(out, SIGHUP);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlrun: run a command in a running job (like srun --jobid N --overlap)", "mlrun"};
  RunArgs a;
  AddOptions(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mlrun: " << e.what() << "\nTry 'mlrun --help'.\n";
    return kExitUsage;
  }
  std::vector<std::string> command = app.remaining();
  if (command.empty()) {
    std::cerr << "mlrun: no command\nTry 'mlrun --help'.\n";
    return kExitUsage;
  }
  if (a.job_id == 0)
    if (const char* env = std::getenv("MLSCHED_JOB_ID")) a.job_id = std::atoll(env);
  if (a.job_id <= 0) {
    std::cerr << "mlrun: no job: give --jobid N of a running job (or run inside one, where MLSCHED_JOB_ID is set).\n"
                 "Starting a new job from mlrun is not built yet: submit it with mlsub first.\n";
    return kExitUsage;
  }
  v1::SessionInput first;
  auto* open = first.mutable_open();
  open->set_job_id(a.job_id);
  open->set_rank(a.rank);
  for (const auto& c : command) open->add_argv(c);
  open->set_pty(a.pty);
  open->set_overlap(a.overlap);
  uint32_t rows = 0, cols = 0;
  if (a.pty && WindowSizeOf(0, &rows, &cols)) {
    open->mutable_window()->set_rows(std::min(rows, kMaxWindowCells));
    open->mutable_window()->set_cols(std::min(cols, kMaxWindowCells));
  }
  if (const char* term = std::getenv("TERM"); a.pty && term) open->set_term(term);
  if (auto err = CheckSessionOpen(*open); !err.empty()) {
    std::cerr << "mlrun: " << err << "\n";
    return kExitUsage;
  }

  // Signals go to SignalLoop only; block them before gRPC makes its threads.
  const sigset_t handled = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  SchedClient client(a.server);
  v1::JobInfo job;  // finds the leader, and says early what is wrong with the job
  if (auto st = client.GetJob(a.job_id, &job); !st.ok()) {
    std::cerr << "mlrun: job " << a.job_id << ": " << st.message << "\n";
    return ExitCodeForRpc(st.code);
  }
  std::string error;
  auto stream = client.OpenSession(&error);
  if (!stream) {
    std::cerr << "mlrun: " << error << "\n";
    return kExitUnreachable;
  }
  Sender sender(*stream);
  if (!sender.Send(first)) {
    auto st = stream->Finish();
    std::cerr << "mlrun: " << st.message << "\n";
    return ExitCodeForRpc(st.code);
  }
  RawTerminal term(a.pty ? 0 : -1);
  std::thread(SignalLoop, std::ref(sender), a.pty, std::ref(term)).detach();
  bool stdin_started = false;
  LineLabeler out_label(std::to_string(a.rank) + ": "), err_label(std::to_string(a.rank) + ": ");
  v1::SessionOutput msg;
  std::optional<v1::SessionExit> exit;
  while (stream->Read(&msg)) {
    if (msg.has_started() && !stdin_started) {
      stdin_started = true;
      std::thread(PumpStdin, std::ref(sender)).detach();
    } else if (msg.has_stdout()) {
      WriteFd(1, a.label ? out_label.Label(msg.stdout()) : msg.stdout());
    } else if (msg.has_stderr()) {
      WriteFd(2, a.label ? err_label.Label(msg.stderr()) : msg.stderr());
    } else if (msg.has_exit()) {
      exit = msg.exit();
      sender.Done();
    }
  }
  auto st = stream->Finish();
  term.Restore();
  if (exit && !exit->error().empty()) {
    std::cerr << "mlrun: " << exit->error() << "\n";
    ExitNow(exit->error().rfind(kSessionLostPrefix, 0) == 0 ? kExitSessionLost : kExitRefused);
  }
  if (exit) ExitNow(exit->exit_code());
  if (!st.ok()) {
    std::cerr << "mlrun: " << st.message << "\n";
    ExitNow(stdin_started ? kExitSessionLost : ExitCodeForRpc(st.code));
  }
  std::cerr << "mlrun: the session ended without the command's exit status\n";
  ExitNow(kExitSessionLost);
}
