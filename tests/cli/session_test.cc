// Interactive sessions' checks and the local terminal (common/session_checks.h, cli/terminal.h):
// every field of an open and of later input has its limit, only the listed signals pass, labels
// survive lines cut across writes, and raw mode is restored.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <csignal>

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

TEST_CASE("srun -l labels: every line, across writes that cut lines") {
  cli::LineLabeler l("3: ");
  CHECK(l.Label("a\nb") == "3: a\n3: b");
  CHECK(l.Label("c\n") == "c\n");
  CHECK(l.Label("\nd\n") == "3: \n3: d\n");
  CHECK(l.Label("") == "");
}

TEST_CASE("raw mode is set on a terminal and restored; not a terminal: nothing") {
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
