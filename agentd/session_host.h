// SessionHost: agentd's side of interactive sessions (proto/mlsched/v1/session.proto), a
// component beside the agent's stream handlers. For each OpenSession from schedd it opens its own
// AgentSessionService.Relay stream on the agent's channel (mutual TLS, or the Unix socket), names
// the session with its id and token, and starts the process in the running task's context: its
// cgroup (the task's limits and its kill hold), its user, groups, umask, environment and working
// directory (SpawnTask, with the session's terminal or pipes as 0, 1, 2).
// Terminal: a pty made by agentd (posix_openpt, the slave through TIOCGPTPEER, never by path),
// the slave owned by the user (mode 0620) and made the controlling terminal by the child after it
// became the user: no root process has it as its terminal, so TIOCSTI from the job reaches only
// the user's own processes. agentd keeps only the master. A task in a container is joined by a
// `runc exec` into its container (container_exec.h; the driver's PrepareExec): runc gets the pty,
// root's and nobody's controlling terminal, and makes the session's own inside the container.
// Flow: output is read 32 KiB at a time and written to the stream, which blocks while schedd and
// the client are slow, so the process blocks on its terminal instead of agentd buffering. Input
// is checked again (CheckSessionInput) before it is written, a window applied, a signal sent to
// the session's process group. When the process exits its remaining output is sent, the rest of
// its session hung up (SIGHUP), then its exit. A stream that ends first hangs the process up,
// and kills what is left of it kHangupGrace later.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agentd/launcher.h"
#include "agentd/task_driver.h"
#include "agentd/task_key.h"
#include "mlsched/v1/agent.grpc.pb.h"

namespace mlsched::agent {

class SessionHost {
 public:
  /// Sessions open at once on this node; more are refused with a reason.
  static constexpr size_t kMaxSessions = 32;
  /// From a hang-up to SIGKILL of what is left of a session.
  static constexpr std::chrono::seconds kHangupGrace{2};

  /// A running task a session may join: its launch request and its cgroup directories (none
  /// without cgroups).
  struct Task {
    LaunchRequest request;
    std::vector<std::string> cgroup_dirs;
  };
  /// The task of `key` when it runs here now, else nullopt.
  using FindTask = std::function<std::optional<Task>(const TaskKey& key)>;
  /// A channel to the schedd that sent the session (the agent's current one; its address in
  /// `*server`), or nullptr.
  using MakeChannel = std::function<std::shared_ptr<grpc::Channel>(std::string* server)>;

  /// How to run a session's process in a task (TaskDriver::PrepareExec: on the node, or a
  /// runtime's exec into the task's container).
  using PrepareExec = std::function<std::string(const TaskKey& key, ExecRequest want, ExecPlan* plan)>;

  SessionHost(std::string node, MakeChannel channel, FindTask find_task, PrepareExec exec)
      : node_(std::move(node)), channel_(std::move(channel)), find_task_(std::move(find_task)), exec_(std::move(exec)) {}
  /// Stop()s.
  ~SessionHost();
  SessionHost(const SessionHost&) = delete;
  SessionHost& operator=(const SessionHost&) = delete;

  /// Starts a session on a thread of its own; returns at once.
  void Open(const v1::OpenSession& msg);
  /// Hangs up every session and waits for their threads.
  void Stop();
  /// Sessions running now.
  size_t Running();

 private:
  struct Live;
  void Run(std::shared_ptr<Live> live, v1::OpenSession msg);

  std::string node_;
  MakeChannel channel_;
  FindTask find_task_;
  PrepareExec exec_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::shared_ptr<Live>> live_;  // by session id
  bool stopping_ = false;
};

}  // namespace mlsched::agent
