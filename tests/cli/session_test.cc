// Interactive sessions' checks and the local terminal (common/session_checks.h, cli/terminal.h):
// every field of an open and of later input has its limit, only the listed signals pass, labels
// survive lines cut across writes, and raw mode is restored.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "cli/run_args.h"
#include "cli/terminal.h"
#include "common/session_checks.h"

using namespace mlsched;

namespace {

v1::SessionOpen GoodOpen() {
  v1::SessionOpen o;
  o.set_job_id(7);
  o.set_rank(1);
  o.add_argv("bash");
  o.set_pty(true);
  o.mutable_window()->set_rows(40);
  o.mutable_window()->set_cols(120);
  o.set_term("xterm-256color");
  return o;
}

}  // namespace

TEST_CASE("a session's open is checked field by field") {
  CHECK(CheckSessionOpen(GoodOpen()) == "");
  auto with = [](auto&& change) {
    v1::SessionOpen o = GoodOpen();
    change(o);
    return CheckSessionOpen(o);
  };
  CHECK(with([](auto& o) { o.set_job_id(0); }) == "job id 0 is not a job");
  CHECK(with([](auto& o) { o.set_rank(-1); }) == "rank -1 is negative");
  CHECK(with([](auto& o) { o.clear_argv(); }) == "no command");
  CHECK(with([](auto& o) { o.set_argv(0, ""); }) == "no command");
  CHECK(with([](auto& o) { o.add_argv(std::string("a\0b", 3)); }) == "an argument holds a NUL byte");
  CHECK(with([](auto& o) { for (size_t i = 0; i < kMaxSessionArgs; ++i) o.add_argv("x"); }).find("arguments (at most 1024)") !=
        std::string::npos);
  CHECK(with([](auto& o) { o.add_argv(std::string(kMaxSessionArgvBytes, 'x')); }).find("bytes (at most 131072)") !=
        std::string::npos);
  CHECK(with([](auto& o) { o.mutable_window()->set_rows(0); }).find("out of range") != std::string::npos);
  CHECK(with([](auto& o) { o.mutable_window()->set_cols(kMaxWindowCells + 1); }).find("out of range") != std::string::npos);
  CHECK(with([](auto& o) { o.set_term("xterm\n$(reboot)"); }).find("TERM holds") != std::string::npos);
  CHECK(with([](auto& o) { o.set_term(std::string(kMaxTermBytes + 1, 'x')); }).find("TERM is longer") != std::string::npos);
  CHECK(with([](auto& o) { o.add_env("RANK=3"); o.add_env("WORLD_SIZE=4"); o.add_env("EMPTY="); }) == "");
  CHECK(with([](auto& o) { o.add_env("NOVALUE"); }) == "'NOVALUE' is not NAME=VALUE");
  CHECK(with([](auto& o) { o.add_env("=x"); }) == "'=x' is not NAME=VALUE");
  CHECK(with([](auto& o) { o.add_env("1A=x"); }) == "'1A=x' is not NAME=VALUE");
  CHECK(with([](auto& o) { o.add_env("A B=x"); }) == "'A B=x' is not NAME=VALUE");
  CHECK(with([](auto& o) { for (size_t i = 0; i <= kMaxSessionEnv; ++i) o.add_env("A=1"); }).find("at most 256") !=
        std::string::npos);
}

TEST_CASE("a session's input: sizes, windows and only the listed signals") {
  v1::SessionInput in;
  CHECK(CheckSessionInput(in) == "an empty message");
  in.set_data(std::string(kMaxSessionChunk, 'x'));
  CHECK(CheckSessionInput(in) == "");
  in.set_data(std::string(kMaxSessionChunk + 1, 'x'));
  CHECK(CheckSessionInput(in).find("at most 65536") != std::string::npos);
  *in.mutable_open() = GoodOpen();
  CHECK(CheckSessionInput(in) == "a second open");
  in.mutable_resize()->set_rows(10);
  in.mutable_resize()->set_cols(70000);  // would wrap to 4464 in TIOCSWINSZ's 16 bits
  CHECK(CheckSessionInput(in).find("out of range") != std::string::npos);
  for (int s : {SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGKILL, SIGUSR1, SIGUSR2, SIGCONT, SIGTSTP, SIGWINCH}) {
    in.set_signal(s);
    CHECK(CheckSessionInput(in) == "");
  }
  for (int s : {0, -9, SIGSTOP, SIGSEGV, SIGCHLD, 64, 1000}) {
    in.set_signal(s);
    CHECK(CheckSessionInput(in).find("may not be sent") != std::string::npos);
  }
}

TEST_CASE("srun -l labels: whole lines only, across writes that cut lines") {
  cli::LineLabeler l("3: ");
  CHECK(l.Label("a\nb") == "3: a\n");  // "b" waits for its newline
  CHECK(l.Label("c\n") == "3: bc\n");
  CHECK(l.Label("\nd\n") == "3: \n3: d\n");
  CHECK(l.Label("") == "");
  CHECK(l.Label("tail") == "");
  CHECK(l.Flush() == "3: tail");
  CHECK(l.Flush() == "");
  const std::string huge(cli::LineLabeler::kMaxHeldLineBytes, 'x');
  CHECK(l.Label(huge) == "3: " + huge);  // a line too long to hold goes out in pieces
}

TEST_CASE("raw mode is set on a terminal and restored, not a terminal: nothing") {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(grantpt(master) == 0);
  REQUIRE(unlockpt(master) == 0);
  const int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  REQUIRE(slave >= 0);
  struct termios before{}, during{}, after{};
  REQUIRE(tcgetattr(slave, &before) == 0);
  CHECK((before.c_lflag & (ICANON | ECHO | ISIG)) != 0);
  {
    cli::RawTerminal raw(slave);
    CHECK(raw.Active());
    REQUIRE(tcgetattr(slave, &during) == 0);
    CHECK((during.c_lflag & (ICANON | ECHO | ISIG)) == 0);
  }
  REQUIRE(tcgetattr(slave, &after) == 0);
  CHECK(after.c_lflag == before.c_lflag);
  CHECK(after.c_iflag == before.c_iflag);
  cli::RawTerminal none(-1);
  CHECK(!none.Active());
  uint32_t rows = 0, cols = 0;
  struct winsize ws{};
  ws.ws_row = 33;
  ws.ws_col = 101;
  ioctl(master, TIOCSWINSZ, &ws);
  CHECK(cli::WindowSizeOf(slave, &rows, &cols));
  CHECK(rows == 33);
  CHECK(cols == 101);
  close(slave);
  close(master);
}

TEST_CASE("mlrun's arguments: its own options anywhere before the command, mlsub's, then the command") {
  auto p = cli::ParseRunArgs({"-n", "3", "-l", "--pty", "-c", "2", "--spot", "allow", "--input=all", "python", "-l", "x.py"});
  REQUIRE(p.error == "");
  CHECK(p.value->own.label);
  CHECK(p.value->own.pty);
  CHECK(p.value->own.input == "all");
  CHECK(p.value->submit.options.ntasks == 3);
  CHECK(p.value->submit.options.cpu_millis_per_task == 2000);
  CHECK(p.value->command == std::vector<std::string>{"python", "-l", "x.py"});  // the command's -l is its own
  auto q = cli::ParseRunArgs({"--jobid", "12", "--rank=1", "--overlap", "--", "-weird-name"});
  REQUIRE(q.error == "");
  CHECK(q.value->own.job_id == 12);
  CHECK(q.value->own.rank == 1);
  CHECK(q.value->own.overlap);
  CHECK(q.value->command == std::vector<std::string>{"-weird-name"});
  CHECK(cli::ParseRunArgs({"--jobid"}).error == "option --jobid needs a value");
  CHECK(cli::ParseRunArgs({"--jobid", "x", "true"}).error == "--jobid: 'x' is not a job id");
  CHECK(cli::ParseRunArgs({"--input", "some", "true"}).error == "--input: 'some' is not 0|all|none|RANK");
  CHECK(cli::ParseRunArgs({"--bogus", "true"}).error.find("unknown option '--bogus'") != std::string::npos);
  // mlalloc takes only -Q of mlrun's options.
  CHECK(cli::ParseRunArgs({"-Q", "-n", "2"}, true).value->own.quiet);
  CHECK(cli::ParseRunArgs({"--pty", "bash"}, true).error.find("unknown option '--pty'") != std::string::npos);
}

TEST_CASE("an allocation's job: mlsub's options over the hold command, batch-only options refused") {
  cli::SubmitContext ctx;
  ctx.cwd = "/home/u";
  auto spec_of = [&](std::vector<std::string> args) {
    auto p = cli::ParseRunArgs(args);
    REQUIRE(p.error == "");
    return cli::BuildAllocationSpec(p.value->submit, ctx, "mlrun");
  };
  auto s = spec_of({"-n", "4", "--gpus-per-task", "1", "-t", "30", "true"});
  REQUIRE(s.error == "");
  CHECK(s.value->ntasks() == 4);
  CHECK(s.value->gpus_per_task() == 1);
  CHECK(s.value->name() == "mlrun");
  CHECK(s.value->stdout_pattern() == "/dev/null");
  CHECK(std::vector<std::string>(s.value->argv().begin(), s.value->argv().end()) == cli::AllocationHoldCommand());
  CHECK(spec_of({"-n", "2-4", "true"}).error.find("elastic sizes") != std::string::npos);
  CHECK(spec_of({"--array", "0-3", "true"}).error.find("--array is for batch jobs") != std::string::npos);
  CHECK(spec_of({"--wrap", "x"}).error.find("--wrap is for mlsub") != std::string::npos);
  CHECK(spec_of({"-J", "dbg", "true"}).value->name() == "dbg");
}

TEST_CASE("a step's ranks and an allocation's variables") {
  std::vector<v1::TaskPlacement> t(3);
  t[0].set_node("a");
  t[1].set_node("a");
  t[2].set_node("b");
  CHECK(cli::StepEnv(1, 3, t) == std::vector<std::string>{"RANK=1", "WORLD_SIZE=3", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                                                          "MLSCHED_STEP_NTASKS=3"});
  CHECK(cli::StepEnv(2, 3, t)[2] == "LOCAL_RANK=0");
  v1::JobInfo job;
  job.set_job_id(42);
  for (const char* n : {"gpu-1", "gpu-1", "gpu-2", "gpu-3"}) job.add_tasks()->set_node(n);
  auto env = cli::AllocationEnv(job);
  CHECK(env[0] == "MLSCHED_JOB_ID=42");
  CHECK(env[1] == "MLSCHED_NODELIST=gpu-[1-3]");
  CHECK(env[2] == "MLSCHED_NTASKS=4");
  CHECK(std::find(env.begin(), env.end(), "SLURM_JOB_NODELIST=gpu-[1-3]") != env.end());
  job.set_reason("Resources");
  job.set_reason_detail("needs 16 h100, 8 free");
  CHECK(cli::PendingLine(job) == "job 42 pending (Resources: needs 16 h100, 8 free)");
}
