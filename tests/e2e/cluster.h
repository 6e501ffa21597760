// End-to-end harness: real schedd and agentd processes on a Unix socket in a temp dir, driven
// through the real command-line tools. Paths of the binaries come from compile definitions.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mlsched::e2e {

/// Exit status and captured output of a finished command.
struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

/// Starts `argv` with stdout/stderr appended to `log`; returns the pid.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, const std::map<std::string, std::string>& env = {});
/// Runs `argv` to completion (killed after `timeout_s`), capturing its output.
RunResult Run(const std::vector<std::string>& argv, int timeout_s = 60);
/// True when a process with this pid exists (and is not a zombie of ours).
bool Alive(pid_t pid);
/// Polls `pred` every 100 ms until it holds or `timeout_s` passes.
bool WaitFor(const std::function<bool()>& pred, double timeout_s);
/// Contents of a file ("" when missing).
std::string ReadFile(const std::filesystem::path& p);

/// How a Cluster is secured.
enum class Transport {
  kUnix,  // tools and agents on schedd's Unix socket (SO_PEERCRED)
  kTls,   // as production: schedd on TLS (127.0.0.1), a private CA and munged; tools prove the
          // user with MUNGE, agents their node with node certificates (mutual TLS)
};

/// A local cluster: one schedd and named agents, all in one temp dir, stopped on destruction.
class Cluster {
 public:
  Cluster();
  /// Starts schedd with `--policy Dir()/policy.toml` holding `policy_toml` ("" = no policy file).
  explicit Cluster(const std::string& policy_toml, Transport transport = Transport::kUnix);
  ~Cluster();
  /// Starts schedd (again, after a crash: same state dir).
  void StartSchedd();
  /// Sends `sig` to schedd and reaps it.
  void StopSchedd(int sig);
  /// Starts an agent with `cpus` CPUs; waits until schedd lists it.
  void StartAgent(const std::string& name, int cpus, const std::string& pool = "on-demand",
                  const std::string& domain = "d1");
  void KillAgent(const std::string& name, int sig);
  /// The pid of agent `name` (started by StartAgent).
  pid_t AgentPid(const std::string& name) const { return agents_.at(name); }
  /// A tool of ours (mlsub, mlq, mlcancel, mladmin) with --server set.
  RunResult Tool(const std::string& tool, std::vector<std::string> args, int timeout_s = 60);
  /// The same tool run as `uid` (gid = uid, no supplementary groups) through setpriv.
  RunResult ToolAs(uint32_t uid, const std::string& tool, std::vector<std::string> args, int timeout_s = 60);
  /// Submits with mlsub --parsable; fails the test on error.
  int64_t Submit(std::vector<std::string> args);
  /// The job's mlq --json object (null when not found).
  nlohmann::json Job(int64_t id);
  std::string State(int64_t id);
  /// Waits until the job reaches `state`.
  bool WaitState(int64_t id, const std::string& state, double timeout_s = 30);
  nlohmann::json Nodes();
  const std::filesystem::path& Dir() const { return dir_; }
  /// The address the tools use: the Unix socket, or "127.0.0.1:PORT" (TLS) once schedd is up.
  std::string Server() const { return tls_address_.empty() ? "unix:" + (dir_ / "schedd.sock").string() : tls_address_; }
  /// kTls only: the TLS address, the CA directory (ca.pem, schedd.pem, nodes/NODE.pem|key), the
  /// munged socket, and schedd's metrics URL ("" when not serving metrics).
  std::string TlsAddress() const { return tls_address_; }
  std::filesystem::path TlsDir() const { return dir_ / "tls"; }
  std::string MungeSocket() const { return (dir_ / "munge" / "munge.sock").string(); }
  std::string MetricsUrl() const { return metrics_url_; }
  /// kTls only: makes the node certificate of `node` (scripts/mlsched-certs.sh) if missing.
  void MakeNodeCertificate(const std::string& node);
  pid_t ScheddPid() const { return schedd_; }
  /// The --policy file of schedd ("" when started without one).
  std::string PolicyFile() const { return policy_file_; }

 private:
  void Init();
  void InitSecurity();
  std::filesystem::path dir_;
  std::string policy_file_;
  Transport transport_ = Transport::kUnix;
  std::string tls_address_, metrics_url_;
  pid_t schedd_ = -1;
  std::map<std::string, pid_t> agents_;
};

}  // namespace mlsched::e2e
