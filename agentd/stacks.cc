#include "agentd/stacks.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mlsched::agent {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string CommOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(f, comm);
  return comm.substr(0, 32);
}

std::string Found(const std::string& name, const std::string& path_list) {
  std::stringstream dirs(path_list);
  for (std::string d; std::getline(dirs, d, ':');) {
    const std::string p = d + "/" + name;
    if (!d.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

}  // namespace

StackTools FindStackTools(const std::string& path_list) {
  return StackTools{Found("eu-stack", path_list), Found("py-spy", path_list), Found("gdb", path_list)};
}

namespace {

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

std::string_view Trimmed(std::string_view line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  return line;
}

bool ThreadHeader(std::string_view line) {
  line = Trimmed(line);
  return line.rfind("TID ", 0) == 0 || line.rfind("Thread ", 0) == 0;
}

// The main thread's block of one process' traces (`pid` "" when unknown): eu-stack's "TID <pid>:"
// (else its first thread, which it prints first), gdb's "Thread 1 (", py-spy's "MainThread"; the
// whole text when it has no thread headers.
std::string MainThreadOf(const std::vector<std::string_view>& lines, const std::string& pid) {
  auto is_main = [&](std::string_view h) {
    h = Trimmed(h);
    return (!pid.empty() && h == "TID " + pid + ":") || h.rfind("Thread 1 (", 0) == 0 || h.find("\"MainThread\"") != std::string_view::npos;
  };
  bool any_header = false, found = false;
  for (auto l : lines)
    if (ThreadHeader(l)) {
      any_header = true;
      found = found || is_main(l);
    }
  std::string out;
  bool in = !any_header, first = true;
  for (auto l : lines) {
    if (ThreadHeader(l)) {
      in = found ? is_main(l) : (first && Trimmed(l).rfind("TID ", 0) == 0);
      first = false;
    }
    if (in) out.append(l).push_back('\n');
  }
  return any_header && out.empty() ? std::string() : out;
}

}  // namespace

std::string MainThreads(std::string_view traces) {
  // Sections "==== PID <pid> (<comm>) ====" (TakeTraces), or one process without a header.
  std::string out, pid;
  std::vector<std::string_view> section;
  auto flush = [&] {
    out += MainThreadOf(section, pid);
    section.clear();
  };
  for (auto l : Lines(traces)) {
    if (l.rfind("==== PID ", 0) == 0) {
      flush();
      out.append(l).push_back('\n');
      auto rest = l.substr(9);
      pid = std::string(rest.substr(0, rest.find(' ')));
      continue;
    }
    section.push_back(l);
  }
  flush();
  return out;
}

bool InCollective(std::string_view traces) {
  // Only main threads: a communication library's own threads (Gloo's event loop, NCCL's proxy)
  // sit in its frames in every rank, hung or not.
  const std::string main = MainThreads(traces);
  traces = main;
  static const char* const kMarks[] = {"allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter",
                                       "reducescatter", "broadcast", "barrier", "nccl", "gloo::", "c10d",
                                       "processgroup", "mpi_allreduce", "mpi_barrier"};
  const std::string low = Lower(traces);
  return std::any_of(std::begin(kMarks), std::end(kMarks), [&](const char* m) { return low.find(m) != std::string::npos; });
}

std::string SummarizeTraces(std::string_view traces, size_t max_bytes) {
  // Frame lines: eu-stack and gdb "#N  ADDRESS [in] FUNCTION ...", py-spy "    FUNCTION (FILE:LINE)".
  std::string out, thread;
  int frames = 0, threads = 0;
  size_t pos = 0;
  while (pos < traces.size() && out.size() < max_bytes && threads <= 4) {
    size_t nl = traces.find('\n', pos);
    if (nl == std::string_view::npos) nl = traces.size();
    std::string_view line = traces.substr(pos, nl - pos);
    pos = nl + 1;
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const bool header = line.rfind("TID ", 0) == 0 || line.rfind("Thread ", 0) == 0;
    if (header) {
      if (!thread.empty()) out += (out.empty() ? "" : " | ") + thread;
      thread.clear();
      frames = 0;
      ++threads;
      continue;
    }
    if (line.empty() || line.front() != '#' || frames >= 3) continue;
    // "#0  0x00007f.. in nanosleep (...) at f.c:1" -> "nanosleep"
    std::string_view rest = line.substr(line.find_first_of(' ') == std::string_view::npos ? line.size() : line.find_first_of(' '));
    std::istringstream words{std::string(rest)};
    std::string w, name;
    while (words >> w) {
      if (w.rfind("0x", 0) == 0 || w == "in") continue;
      name = w.substr(0, w.find('('));
      break;
    }
    if (name.empty()) continue;
    thread += (frames ? " < " : "") + name;
    ++frames;
  }
  if (!thread.empty()) out += (out.empty() ? "" : " | ") + thread;
  if (out.size() > max_bytes) out.resize(max_bytes);
  return out;
}

std::vector<pid_t> TaskProcesses(const std::vector<std::string>& cgroup_dirs, pid_t pid) {
  std::vector<pid_t> out{pid};
  for (const auto& dir : cgroup_dirs) {
    std::ifstream f(dir + "/cgroup.procs");
    for (long p; out.size() < kMaxTracedProcesses && f >> p;)
      if (p > 0 && std::find(out.begin(), out.end(), static_cast<pid_t>(p)) == out.end()) out.push_back(static_cast<pid_t>(p));
    if (f.is_open()) break;  // one hierarchy is enough (v1 lists the same processes in each)
  }
  return out;
}

std::string TakeTraces(const StackTools& tools, const std::vector<pid_t>& pids, const ToolUser& user, std::string* error) {
  std::string out;
  error->clear();
  if (!tools.Any()) {
    *error = "no stack tool (install elfutils' eu-stack, or gdb)";
    return out;
  }
  const std::vector<std::string> env{"PATH=/usr/bin:/bin", "LC_ALL=C"};
  for (pid_t pid : pids) {
    if (out.size() >= kMaxTraceBytes) break;
    const std::string comm = CommOf(pid);
    const std::string p = std::to_string(pid);
    std::vector<std::string> argv;
    if (!tools.py_spy.empty() && comm.rfind("python", 0) == 0) argv = {tools.py_spy, "dump", "--pid", p};
    else if (!tools.eu_stack.empty()) argv = {tools.eu_stack, "-p", p};
    else argv = {tools.gdb, "-batch", "-nx", "-p", p, "-ex", "thread apply all bt"};
    ToolResult r = RunTool(argv, env, kTraceTimeout, kMaxTraceBytes - out.size(), &user);
    out += "==== PID " + p + " (" + comm + ") ====\n" + r.output + (r.output.empty() || r.output.back() == '\n' ? "" : "\n");
    if (!r.Ok() && error->empty())
      *error = argv[0].substr(argv[0].rfind('/') + 1) + " on pid " + p + ": " +
               (r.timed_out ? "timed out" : !r.error.empty() ? r.error : r.Reason());
  }
  if (out.size() > kMaxTraceBytes) out.resize(kMaxTraceBytes);
  return out;
}

namespace {

// Writes `text` as `user` in a helper process: a new file `name` in `dir` (O_EXCL), or, with
// `append`, the end of the existing regular file `dir` (a path; O_APPEND). The child only makes
// system calls (no allocation after fork in a threaded process): it reports the failing stage and
// errno through the pipe.
std::string WriteAsUser(const std::string& dir, const std::string& name, const std::string& text, const ToolUser& user,
                        bool append) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) return std::string("pipe2: ") + std::strerror(errno);
  const int dir_flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  const int file_flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  // O_NONBLOCK: a FIFO in the file's place must not hold the helper (refused as not regular).
  const int append_flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  const pid_t pid = ForkHelper();
  if (pid == 0) {
    close(fds[0]);
    auto die = [&](int stage) {
      const int report[2] = {stage, errno};
      ssize_t n = write(fds[1], report, sizeof report);
      (void)n;
      _exit(1);
    };
    if (getuid() == 0 && (setgroups(user.groups.size(), user.groups.data()) != 0 || setgid(user.gid) != 0 || setuid(user.uid) != 0))
      die(0);
    int f = -1;
    if (append) {
      f = open(dir.c_str(), append_flags);
      if (f < 0) die(2);
      struct stat st;
      if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode)) {
        errno = EINVAL;
        die(4);
      }
    } else {
      const int d = open(dir.c_str(), dir_flags);
      if (d < 0) die(1);
      f = openat(d, name.c_str(), file_flags, 0600);
      if (f < 0) die(2);
    }
    for (size_t off = 0; off < text.size();) {
      const ssize_t n = write(f, text.data() + off, text.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die(3);
      off += static_cast<size_t>(n);
    }
    if (close(f) != 0) die(3);
    _exit(0);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return std::string("fork: ") + std::strerror(errno);
  }
  int report[2] = {-1, 0};
  ssize_t got;
  do got = read(fds[0], report, sizeof report);
  while (got < 0 && errno == EINTR);
  close(fds[0]);
  const int status = WaitHelper(pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  static const char* const kStage[] = {"cannot switch to the job's user", "cannot open the directory", "cannot create the file",
                                       "cannot write the file", "not a regular file:"};
  const std::string path = append ? dir : dir + "/" + name;
  if (got != static_cast<ssize_t>(sizeof report) || report[0] < 0 || report[0] > 4) return "the writer failed";
  const std::string stage = append && report[0] == 2 ? "cannot open the file" : kStage[report[0]];
  return stage + " " + path + ": " + std::strerror(report[1]);
}

}  // namespace

std::string WriteFileAsUser(const std::string& dir, const std::string& name, const std::string& text, const ToolUser& user) {
  if (dir.empty() || dir[0] != '/' || name.empty() || name.find('/') != std::string::npos) return "bad path " + dir + "/" + name;
  return WriteAsUser(dir, name, text, user, false);
}

std::string AppendToFileAsUser(const std::string& path, const std::string& text, const ToolUser& user) {
  if (path.empty() || path[0] != '/') return "bad path " + path;
  return WriteAsUser(path, "", text, user, true);
}

}  // namespace mlsched::agent
