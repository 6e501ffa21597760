// Stack traces for the gang watchdog (agentd/stacks.h): collective frames recognized, summaries,
// a real process traced as its user (eu-stack or gdb), and the file written as the user, never
// through a link the user planted.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <sstream>

#include "agentd/stacks.h"
#include "support.h"

using namespace mlsched::agent;

TEST_CASE("collective waits are recognized in eu-stack, gdb and py-spy traces", "[stacks]") {
  const std::string eu = "PID 4242 - process\nTID 4242:\n#0  0x00007f1 __futex_abstimed_wait_common\n#1  0x00007f2 "
                         "gloo::transport::tcp::UnboundBuffer::waitRecv\n#2  0x00007f3 gloo::allreduce\n"
                         "TID 4250:\n#0  0x00007f4 epoll_wait\n";
  CHECK(InCollective(eu));
  CHECK(SummarizeTraces(eu) == "__futex_abstimed_wait_common < gloo::transport::tcp::UnboundBuffer::waitRecv < gloo::allreduce | epoll_wait");
  const std::string gdb = "Thread 1 (Thread 0x7f (LWP 77) \"python\"):\n#0  0x00007f in ncclKernel_AllReduce () from libnccl.so\n";
  CHECK(InCollective(gdb));
  CHECK(SummarizeTraces(gdb) == "ncclKernel_AllReduce");
  CHECK(InCollective("Thread 77 (active): \"MainThread\"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"));
  const std::string compute = "TID 9:\n#0  0x1 dgemm_kernel\n#1  0x2 cblas_sgemm\n#2  0x3 Forward\n#3  0x4 main\n";
  CHECK_FALSE(InCollective(compute));
  CHECK(SummarizeTraces(compute) == "dgemm_kernel < cblas_sgemm < Forward");
  CHECK(SummarizeTraces(std::string(5000, '#') + "\n", 100).size() <= 100);
}

TEST_CASE("a hung rank's helper threads in Gloo or NCCL do not put it in the collective", "[stacks]") {
  // The wedged rank: its main thread sleeps in the training loop; Gloo's event loop and NCCL's
  // proxy thread wait in their libraries as in every rank.
  const std::string hung =
      "==== PID 4249 (mltrain) ====\nPID 4249 - process\nTID 4249:\n#0  0x1 clock_nanosleep\n#1  0x2 mltrain::Trainer::InjectTestFaults\n"
      "TID 4251:\n#0  0x3 epoll_wait\n#1  0x4 gloo::transport::tcp::Loop::run\nTID 4252:\n#0  0x5 ncclProxyService\n";
  CHECK_FALSE(InCollective(hung));
  CHECK(MainThreads(hung).find("InjectTestFaults") != std::string::npos);
  CHECK(MainThreads(hung).find("Loop::run") == std::string::npos);
  // Its peers: the main thread in the all-reduce.
  const std::string peer =
      "==== PID 4300 (mltrain) ====\nTID 4301:\n#0  0x3 epoll_wait\nTID 4300:\n#0  0x1 __futex_wait\n#1  0x2 mltrain::ShmAllReduce::Sum\n";
  CHECK(InCollective(peer));
  // gdb numbers the main thread 1 and prints it last; py-spy names it MainThread.
  CHECK_FALSE(InCollective("Thread 2 (LWP 8):\n#0  0x1 in ncclProxyProgress ()\nThread 1 (LWP 7):\n#0  0x2 in nanosleep ()\n"));
  CHECK_FALSE(InCollective("Thread 0x1 (idle): \"nccl-proxy\"\n    all_reduce (x.py:1)\nThread 0x2 (active): \"MainThread\"\n    train (t.py:9)\n"));
  // Two processes (a launcher and its worker): the worker's main thread waits in the collective.
  CHECK(InCollective("==== PID 1 (torchrun) ====\nTID 1:\n#0 0x1 waitpid\n==== PID 2 (python3) ====\nTID 2:\n#0 0x2 c10d::ProcessGroupGloo::allreduce\n"));
}

TEST_CASE("a sleeping process is traced as its user", "[stacks]") {
  const StackTools tools = FindStackTools();
  if (!tools.Any()) {
    WARN("skipped: neither eu-stack nor gdb is installed");
    return;
  }
  if (geteuid() != 0) {
    WARN("skipped: switching users needs root");
    return;
  }
  const pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(1);
    execl("/bin/sleep", "sleep", "60", nullptr);
    _exit(127);
  }
  REQUIRE(child > 0);
  usleep(200 * 1000);
  std::string error;
  const std::string traces = TakeTraces(tools, TaskProcesses({}, child), ToolUser{65534, 65534, {}}, &error);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  INFO(traces << "\nerror: " << error);
  CHECK(error.empty());
  CHECK_THAT(traces, Catch::StartsWith("==== PID " + std::to_string(child) + " (sleep) ===="));
  CHECK_THAT(traces, Catch::Contains("sleep"));  // clock_nanosleep / nanosleep frames
  CHECK_FALSE(InCollective(traces));
  // A process of another user (root's) is not traced by a tool running as nobody.
  const std::string root_traces = TakeTraces(tools, {getpid()}, ToolUser{65534, 65534, {}}, &error);
  CHECK_FALSE(error.empty());
}

TEST_CASE("the traces are written as the user, never through a planted link", "[stacks][security]") {
  if (geteuid() != 0) {
    WARN("skipped: switching users needs root");
    return;
  }
  testing::TempDir dir;
  chmod(dir.Str().c_str(), 0777);
  const ToolUser nobody{65534, 65534, {}};
  REQUIRE(WriteFileAsUser(dir.Str(), "mlsched-stacks-1.1.0.txt", "traces\n", nobody) == "");
  struct stat st {};
  REQUIRE(stat(dir.Str("mlsched-stacks-1.1.0.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == 65534);
  CHECK((st.st_mode & 0777) == 0600);
  // Never over an existing file.
  CHECK_THAT(WriteFileAsUser(dir.Str(), "mlsched-stacks-1.1.0.txt", "again\n", nobody), Catch::Contains("cannot create"));
  // The attack: the user links the name to a file of root's; nothing is written through it.
  const std::string target = dir.Str("root-owned");
  std::ofstream(target) << "root's\n";
  chmod(target.c_str(), 0644);
  REQUIRE(symlink(target.c_str(), dir.Str("mlsched-stacks-1.1.1.txt").c_str()) == 0);
  CHECK_THAT(WriteFileAsUser(dir.Str(), "mlsched-stacks-1.1.1.txt", "owned\n", nobody), Catch::Contains("cannot create"));
  std::ifstream in(target);
  std::stringstream body;
  body << in.rdbuf();
  CHECK(body.str() == "root's\n");
  // A directory the user may not write: refused as the user, though root could.
  chmod(dir.Str().c_str(), 0755);
  CHECK_THAT(WriteFileAsUser(dir.Str(), "other.txt", "x", nobody), Catch::Contains("Permission denied"));
  CHECK_THAT(WriteFileAsUser(dir.Str(), "../escape.txt", "x", nobody), Catch::Contains("bad path"));
}

TEST_CASE("a notice is appended to a task's stderr as its user, a planted link, FIFO or foreign file is refused at once",
          "[stacks][security][idle]") {
  if (geteuid() != 0) {
    WARN("skipped: switching users needs root");
    return;
  }
  testing::TempDir dir;
  chmod(dir.Str().c_str(), 0777);
  const ToolUser nobody{65534, 65534, {}};
  const std::string err = dir.Str("job.err");
  std::ofstream(err) << "epoch 1\n";
  REQUIRE(chown(err.c_str(), 65534, 65534) == 0);
  REQUIRE(AppendToFileAsUser(err, "mlsched: WARNING: idle\n", nobody) == "");
  auto body = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  CHECK(body(err) == "epoch 1\nmlsched: WARNING: idle\n");
  // Never created: a stderr file the user removed stays removed.
  CHECK_THAT(AppendToFileAsUser(dir.Str("gone.err"), "x\n", nobody), Catch::Contains("cannot open the file"));
  CHECK(access(dir.Str("gone.err").c_str(), F_OK) != 0);
  // The attacks: the user replaces its stderr by a link to root's file, or by a FIFO nobody reads
  // (the agent's helper must not wait on it), or names a file only root may write.
  const std::string target = dir.Str("root-owned");
  std::ofstream(target) << "root's\n";
  chmod(target.c_str(), 0644);
  REQUIRE(symlink(target.c_str(), dir.Str("link.err").c_str()) == 0);
  CHECK_THAT(AppendToFileAsUser(dir.Str("link.err"), "owned\n", nobody), Catch::Contains("cannot open the file"));
  CHECK_THAT(AppendToFileAsUser(target, "owned\n", nobody), Catch::Contains("Permission denied"));
  CHECK(body(target) == "root's\n");
  REQUIRE(mkfifo(dir.Str("fifo.err").c_str(), 0666) == 0);
  chmod(dir.Str("fifo.err").c_str(), 0666);  // the user's own FIFO, past the umask
  CHECK_THAT(AppendToFileAsUser(dir.Str("fifo.err"), "x\n", nobody), Catch::Contains("cannot open the file"));  // ENXIO: no reader
  std::string fifo_reader_error;
  {
    // With a reader it opens, and is still refused: not a regular file.
    const int rd = open(dir.Str("fifo.err").c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(rd >= 0);
    fifo_reader_error = AppendToFileAsUser(dir.Str("fifo.err"), "x\n", nobody);
    close(rd);
  }
  CHECK_THAT(fifo_reader_error, Catch::Contains("not a regular file"));
  CHECK_THAT(AppendToFileAsUser("relative.err", "x", nobody), Catch::Contains("bad path"));
}
