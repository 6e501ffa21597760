// mlrun (srun): runs a command as a job step, its output live on this terminal, its input from it.
//  - Outside a job: allocates with mlsub's options (an allocation job, cli/run_args.h), waits with
//    a status line while it is pending (Ctrl-C cancels it), runs the command on every rank, then
//    releases the allocation.
//  - Inside a job or mlalloc ($MLSCHED_JOB_ID): a step on the job's first -n ranks (all by default)
//    with a K-rank world's RANK, WORLD_SIZE, LOCAL_RANK.
//  - --jobid N --overlap [--rank R]: into a running job from outside (attach, debugging).
// Sessions travel on the authenticated channel to schedd (proto/mlsched/v1/session.proto).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/allocate.h"
#include "cli/exit_codes.h"
#include "cli/rpc.h"
#include "cli/run_args.h"
#include "cli/terminal.h"
#include "common/safe_text.h"
#include "common/session_checks.h"


namespace {

using namespace mlsched;
using namespace mlsched::cli;

/// mlrun's own failures beside the remote command's exit status (which it otherwise returns).
constexpr int kExitSessionLost = 255;  // a node's stream ended before the command did

constexpr const char* kUsage =
    "Usage: mlrun [MLSUB OPTIONS] [-l] [--pty] [-i 0|all|none|RANK] [-Q] COMMAND [ARGS...]\n"
    "       mlrun --jobid N --overlap [--rank R] [--pty] [-l] COMMAND [ARGS...]\n"
    "Runs COMMAND as a job step (srun). Outside a job it allocates with mlsub's options (-n, -c, --gpus-per-task,\n"
    "-t, -p, -A, --qos, --spot, --container-*; not elastic sizes or arrays), waits while the allocation is\n"
    "pending (Ctrl-C cancels it), runs COMMAND on every rank and releases the allocation. Inside a job or an\n"
    "mlalloc shell ($MLSCHED_JOB_ID) it runs on the job's first -n ranks (default all) with their RANK,\n"
    "WORLD_SIZE and LOCAL_RANK. --jobid N --overlap runs in a running job from outside (one rank with --rank).\n\n"
    "mlrun options:\n"
    "  --jobid N       run in the running job N\n"
    "  --overlap       share a running job's resources with its tasks (required with --jobid)\n"
    "  --rank R        only on rank R of the job\n"
    "  --pty           give rank 0 a terminal; your terminal is raw meanwhile (keys go to the remote one)\n"
    "  -l, --label     prefix output lines with the rank\n"
    "  -i, --input X   stdin goes to rank 0 (default), all, none or rank X\n"
    "  -Q, --quiet     no status lines while the allocation is pending\n\n"
    "Without --pty, Ctrl-C sends SIGINT to the command; twice within a second kills it. mlrun exits with the\n"
    "highest exit status of the ranks (128 + N when signal N ended one). Its own failures: 1 refused or the\n"
    "allocation ended before it ran, 2 usage, 3 schedd unreachable, 130 interrupted while pending (the\n"
    "allocation is cancelled), 255 a session broke (a node's agent or schedd went away).\n\n"
    "MLSUB OPTIONS:\n";

// Writes all of `data` to `fd`.
void WriteFd(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// One rank's session: its stream and its one writer.
struct Rank {
  int32_t rank = 0;
  std::unique_ptr<SessionStream> stream;
  std::mutex mu;
  bool done = false;
  bool started = false;
  std::optional<v1::SessionExit> exit;
  RpcStatus status;
  bool Send(const v1::SessionInput& in) {
    std::lock_guard lk(mu);
    return !done && stream->Write(in);
  }
  void Done() {
    std::lock_guard lk(mu);
    if (!done) stream->WritesDone();
    done = true;
  }
};

// What the signal thread acts on.
struct Control {
  std::mutex mu;
  std::vector<Rank*> ranks;
  std::atomic<bool> pending{false};  // an allocation is pending: Ctrl-C cancels it
  std::atomic<bool> cancel{false};
  bool pty = false;
  RawTerminal* term = nullptr;
  void Broadcast(int signal) {
    std::lock_guard lk(mu);
    v1::SessionInput in;
    in.set_signal(signal);
    for (Rank* r : ranks) r->Send(in);
  }
};

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGWINCH}) sigaddset(&set, s);
  return set;
}

void SignalLoop(Control& c) {
  const sigset_t set = HandledSignals();
  auto last_int = std::chrono::steady_clock::time_point{};
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (c.pending && (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)) {
      c.cancel = true;
    } else if (sig == SIGWINCH) {
      uint32_t rows = 0, cols = 0;
      std::lock_guard lk(c.mu);
      if (c.pty && !c.ranks.empty() && WindowSizeOf(0, &rows, &cols)) {
        v1::SessionInput in;
        in.mutable_resize()->set_rows(std::min(rows, kMaxWindowCells));
        in.mutable_resize()->set_cols(std::min(cols, kMaxWindowCells));
        c.ranks[0]->Send(in);
      }
    } else if (sig == SIGINT) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_int < std::chrono::seconds(1)) {
        if (c.term) c.term->Restore();
        std::cerr << "mlrun: interrupted twice: killing the step\n";
        c.Broadcast(SIGKILL);
      } else {
        c.Broadcast(SIGINT);
      }
      last_int = now;
    } else if (sig == SIGQUIT) {
      c.Broadcast(SIGQUIT);
    } else {  // SIGTERM, SIGHUP: mlrun is going away; the step is hung up
      c.Broadcast(SIGHUP);
    }
  }
}

// stdin -> the ranks `to` (EOF sent once to each).
void PumpStdin(std::vector<Rank*> to) {
  std::string buf(32 * 1024, '\0');
  for (;;) {
    const ssize_t n = read(0, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    v1::SessionInput in;
    in.set_data(buf.data(), static_cast<size_t>(n));
    for (Rank* r : to) r->Send(in);
  }
  v1::SessionInput eof;
  eof.set_eof(true);
  for (Rank* r : to) r->Send(eof);
}

// The job's placement by rank.
std::vector<v1::TaskPlacement> TasksByRank(const v1::JobInfo& job) {
  std::vector<v1::TaskPlacement> t(job.tasks().begin(), job.tasks().end());
  std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) { return a.rank() < b.rank(); });
  return t;
}

// Runs `command` on `ranks` of `job` (step_env: each gets the K-rank world's variables) and returns
// mlrun's exit status.
int RunStep(SchedClient& client, const v1::JobInfo& job, const std::vector<int32_t>& ranks, bool step_env,
            const std::vector<std::string>& command, const RunOptions& own, Control& control) {
  std::vector<v1::TaskPlacement> step;  // with step_env: the ranks' placements, in step order
  if (step_env) {
    const auto placed = TasksByRank(job);
    for (int32_t r : ranks)
      if (static_cast<size_t>(r) < placed.size()) step.push_back(placed[static_cast<size_t>(r)]);
    if (step.size() != ranks.size()) step_env = false;  // schedd names the missing rank
  }
  std::vector<std::unique_ptr<Rank>> sessions;
  const int32_t n = static_cast<int32_t>(ranks.size());
  // The step (JOB.STEP) its sessions are the tasks of; a schedd without steps takes them without.
  std::optional<int32_t> step_id;
  {
    int32_t id = 0;
    const RpcStatus st = client.StartStep(job.job_id(), n, command, &id);
    if (st.ok()) step_id = id;
    else if (st.code != 12) {  // UNIMPLEMENTED
      std::cerr << "mlrun: " << SafeText(st.message) << "\n";
      return ExitCodeForRpc(st.code);
    }
  }
  uint32_t rows = 0, cols = 0;
  const bool has_window = own.pty && WindowSizeOf(0, &rows, &cols);
  for (int32_t i = 0; i < n; ++i) {
    v1::SessionInput first;
    auto* open = first.mutable_open();
    open->set_job_id(job.job_id());
    open->set_rank(ranks[static_cast<size_t>(i)]);
    for (const auto& c : command) open->add_argv(c);
    open->set_overlap(true);
    if (step_id) {
      open->set_step_id(*step_id);
      open->set_step_task(i);
    }
    if (step_env)
      for (const auto& kv : StepEnv(i, n, step)) open->add_env(kv);
    if (own.pty && i == 0) {
      open->set_pty(true);
      if (has_window) {
        open->mutable_window()->set_rows(std::min(rows, kMaxWindowCells));
        open->mutable_window()->set_cols(std::min(cols, kMaxWindowCells));
      }
      if (const char* term = std::getenv("TERM")) open->set_term(term);
    }
    if (auto err = CheckSessionOpen(*open); !err.empty()) {
      std::cerr << "mlrun: " << SafeText(err) << "\n";
      return kExitUsage;
    }
    auto r = std::make_unique<Rank>();
    r->rank = ranks[static_cast<size_t>(i)];
    std::string error;
    r->stream = client.OpenSession(&error);
    if (!r->stream || !r->Send(first)) {
      std::cerr << "mlrun: " << (r->stream ? r->stream->Finish().message : error) << "\n";
      for (auto& s : sessions) s->stream->Cancel();
      return kExitUnreachable;
    }
    sessions.push_back(std::move(r));
  }
  {
    std::lock_guard lk(control.mu);
    for (auto& s : sessions) control.ranks.push_back(s.get());
  }
  std::vector<Rank*> stdin_to;
  for (auto& s : sessions)
    if (own.input == "all" || own.input == std::to_string(s->rank)) stdin_to.push_back(s.get());
  std::mutex out_mu;
  std::atomic<int> started{0};
  auto reader = [&](Rank& r) {
    LineLabeler out_label(std::to_string(r.rank) + ": "), err_label(std::to_string(r.rank) + ": ");
    const bool label = own.label;
    v1::SessionOutput msg;
    while (r.stream->Read(&msg)) {
      if (msg.has_started()) {
        r.started = true;
        if (++started == n && !stdin_to.empty()) std::thread(PumpStdin, stdin_to).detach();
      } else if (msg.has_stdout() || msg.has_stderr()) {
        const bool err = msg.has_stderr();
        const std::string& data = err ? msg.stderr() : msg.stdout();
        std::lock_guard lk(out_mu);
        WriteFd(err ? 2 : 1, label ? (err ? err_label : out_label).Label(data) : data);
      } else if (msg.has_exit()) {
        r.exit = msg.exit();
        r.Done();
      }
    }
    if (label) {
      std::lock_guard lk(out_mu);
      WriteFd(1, out_label.Flush());
      WriteFd(2, err_label.Flush());
    }
    r.status = r.stream->Finish();
  };
  std::vector<std::thread> readers;
  for (auto& s : sessions) readers.emplace_back(reader, std::ref(*s));
  for (auto& t : readers) t.join();
  {
    std::lock_guard lk(control.mu);
    control.ranks.clear();
  }
  if (control.term) control.term->Restore();
  int code = 0;
  bool lost = false, refused = false;
  for (auto& s : sessions) {
    const std::string who = n > 1 ? "rank " + std::to_string(s->rank) + ": " : "";
    if (s->exit && !s->exit->error().empty()) {
      std::cerr << "mlrun: " << who << SafeText(s->exit->error()) << "\n";
      (s->exit->error().rfind(kSessionLostPrefix, 0) == 0 ? lost : refused) = true;
    } else if (s->exit) {
      code = std::max(code, s->exit->exit_code());
    } else {
      std::cerr << "mlrun: " << who << SafeText(s->status.ok() ? "the session ended without an exit status" : s->status.message)
                << "\n";
      (s->started || s->status.ok() ? lost : refused) = true;
      if (!s->started && !s->status.ok()) code = std::max(code, ExitCodeForRpc(s->status.code));
    }
  }
  if (lost) return kExitSessionLost;
  if (refused && code == 0) return kExitRefused;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = ParseRunArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args) {
    std::cerr << "mlrun: " << args.error << "\nTry 'mlrun --help'.\n";
    return kExitUsage;
  }
  RunArgs& a = *args.value;
  if (a.submit.options.help) {
    std::cout << kUsage << SubmitOptionsHelp() << "\n" << ExitCodesHelp();
    return kExitOk;
  }
  if (a.command.empty()) {
    std::cerr << "mlrun: no command\nTry 'mlrun --help'.\n";
    return kExitUsage;
  }
  int64_t job_id = a.own.job_id;
  const bool explicit_job = job_id > 0;
  if (!explicit_job)
    if (const char* env = std::getenv("MLSCHED_JOB_ID"); env && *env) job_id = std::atoll(env);
  if (explicit_job && !a.own.overlap) {
    std::cerr << "mlrun: --jobid " << job_id << ": a step in a running job shares its tasks' resources; "
              << "ask for that with --overlap (as srun)\n";
    return kExitUsage;
  }
  const sigset_t handled = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);  // SignalLoop takes them; before gRPC's threads
  SchedClient client(a.submit.options.server.value_or(""));
  if (!client.ConfigError().empty()) {
    std::cerr << "mlrun: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  Control control;
  control.pty = a.own.pty;
  std::thread(SignalLoop, std::ref(control)).detach();
  v1::JobInfo job;
  bool allocated = false;
  if (job_id > 0) {
    if (auto st = client.GetJob(job_id, &job); !st.ok()) {
      std::cerr << "mlrun: job " << job_id << ": " << SafeText(st.message) << "\n";
      ExitNow(ExitCodeForRpc(st.code));
    }
  } else {
    auto spec = BuildAllocationSpec(a.submit, ThisProcessContext(), "mlrun");
    if (!spec) {
      std::cerr << "mlrun: " << SafeText(spec.error) << "\n";
      return kExitUsage;
    }
    int code = 0;
    control.pending = true;  // Ctrl-C now cancels the allocation
    auto got = AllocateAndWait(client, *spec.value, "mlrun", a.own.quiet, control.cancel, &code,
                               a.submit.options.submission_key.value_or(""));
    control.pending = false;
    if (!got) ExitNow(code);
    job = *got;
    allocated = true;
  }
  std::vector<int32_t> ranks;
  if (a.own.rank) {
    ranks.push_back(*a.own.rank);  // schedd says when the job has no such rank
  } else {
    int64_t k = a.submit.options.ntasks.value_or(job.tasks_size());
    if (!allocated && (k < 1 || k > job.tasks_size())) {
      std::cerr << "mlrun: -n " << k << ": job " << job_id << " has " << job.tasks_size() << " task(s)\n";
      ExitNow(kExitUsage);
    }
    for (int32_t r = 0; r < std::min<int64_t>(k, job.tasks_size()); ++r) ranks.push_back(r);
  }
  RawTerminal term(a.own.pty ? 0 : -1);
  control.term = &term;
  const int code = RunStep(client, job, ranks, !a.own.rank.has_value(), a.command, a.own, control);
  if (allocated) ReleaseAllocation(client, job.job_id());
  ExitNow(code);
}
