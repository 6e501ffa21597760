#include "tests/e2e/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace mlsched::e2e {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log, const std::map<std::string, std::string>& env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) FAIL("cannot start " << argv[0] << ": " << strerror(rc));
  return pid;
}

RunResult Run(const std::vector<std::string>& argv, int timeout_s) {
  static int seq = 0;
  fs::path base = fs::temp_directory_path() / ("mlsched-run-" + std::to_string(getpid()) + "-" + std::to_string(seq++));
  std::string out = base.string() + ".out", err = base.string() + ".err";
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  RunResult r;
  if (rc != 0) {
    r.err = std::string("cannot start ") + argv[0] + ": " + strerror(rc);
    return r;
  }
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto rp = stat.rfind(')');
  return !(rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z');
}

bool WaitFor(const std::function<bool()>& pred, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

Cluster::Cluster() {
  Init();
  StartSchedd();
}

Cluster::Cluster(const std::string& policy_toml, Transport transport) : transport_(transport) {
  Init();
  if (!policy_toml.empty()) {
    policy_file_ = (dir_ / "policy.toml").string();
    std::ofstream(policy_file_) << policy_toml;
  }
  if (transport_ == Transport::kTls) InitSecurity();
  StartSchedd();
}

namespace {
bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }
std::string CertScript() { return std::string(MLSCHED_SOURCE_DIR) + "/scripts/mlsched-certs.sh"; }
}  // namespace

void Cluster::InitSecurity() {
  // Every local user may reach the CA and the munged socket (as on a real cluster); keys stay 0600.
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec |
                            fs::perms::group_read | fs::perms::others_read);
  REQUIRE(Sh("bash " + CertScript() + " " + TlsDir().string() + " ca >/dev/null"));
  REQUIRE(Sh("bash " + CertScript() + " " + TlsDir().string() + " schedd localhost >/dev/null"));
  fs::permissions(TlsDir(), fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::path m = dir_ / "munge";
  fs::create_directories(m);
  fs::permissions(m, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  REQUIRE(Sh("mungekey --create --keyfile=" + (m / "munge.key").string()));
  REQUIRE(Sh("munged --force --socket=" + MungeSocket() + " --key-file=" + (m / "munge.key").string() +
             " --pid-file=" + (m / "munged.pid").string() + " --log-file=" + (dir_ / "munged.log").string() +
             " --seed-file=" + (m / "munged.seed").string()));
  REQUIRE(WaitFor([&] { return fs::exists(MungeSocket()); }, 5));
  setenv("MLSCHED_TLS_CA", (TlsDir() / "ca.pem").c_str(), 1);
  setenv("MLSCHED_MUNGE_SOCKET", MungeSocket().c_str(), 1);
}

void Cluster::MakeNodeCertificate(const std::string& node) {
  if (fs::exists(TlsDir() / "nodes" / (node + ".pem"))) return;
  REQUIRE(Sh("bash " + CertScript() + " " + TlsDir().string() + " node " + node + " >/dev/null"));
}

void Cluster::Init() {
  std::random_device rd;
  dir_ = fs::temp_directory_path() / ("mlsched-e2e-" + std::to_string(rd()));
  fs::create_directories(dir_);
  setenv("MLSCHED_SERVER", Server().c_str(), 1);
}

Cluster::~Cluster() {
  for (auto& [name, pid] : agents_) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  if (schedd_ > 0) StopSchedd(SIGTERM);
  if (transport_ == Transport::kTls) {
    pid_t munged = 0;
    std::ifstream pid(dir_ / "munge" / "munged.pid");
    if (pid >> munged && munged > 0 && kill(munged, SIGTERM) == 0)
      WaitFor([&] { return kill(munged, 0) != 0; }, 5);  // not our child: poll until it is gone
    unsetenv("MLSCHED_TLS_CA");
    unsetenv("MLSCHED_MUNGE_SOCKET");
  }
  std::error_code ec;
  if (!getenv("MLSCHED_KEEP_E2E")) fs::remove_all(dir_, ec);
}

void Cluster::StartSchedd() {
  std::vector<std::string> argv{MLSCHED_SCHEDD_BIN, "--listen", "unix:" + (dir_ / "schedd.sock").string(), "--state-dir",
                                (dir_ / "state").string(), "--heartbeat-interval", "1", "--heartbeat-timeout", "4",
                                "--kill-grace", "2", "--requeue-backoff", "1", "--cycle-interval-ms", "200",
                                "--log-level", "debug"};
  if (!policy_file_.empty()) argv.insert(argv.end(), {"--policy", policy_file_});
  if (transport_ == Transport::kTls)
    argv.insert(argv.end(), {"--listen-tcp", "127.0.0.1:0", "--tls-cert", (TlsDir() / "schedd.pem").string(), "--tls-key",
                             (TlsDir() / "schedd.key").string(), "--tls-ca", (TlsDir() / "ca.pem").string(),
                             "--munge-socket", MungeSocket(), "--metrics-port", "0"});
  const size_t log_start = ReadFile(dir_ / "schedd.log").size();
  schedd_ = Spawn(argv, (dir_ / "schedd.log").string());
  if (transport_ == Transport::kTls) {
    // The ports schedd bound, from its log ("... and tls:127.0.0.1:PORT", "metrics on http://...").
    tls_address_.clear();
    REQUIRE(WaitFor([&] {
      std::string log = ReadFile(dir_ / "schedd.log").substr(log_start);
      auto t = log.find("and tls:"), m = log.find("metrics on ");
      if (t == std::string::npos || m == std::string::npos) return false;
      tls_address_ = log.substr(t + 8, log.find_first_of(", \n", t + 8) - t - 8);
      metrics_url_ = log.substr(m + 11, log.find_first_of(" \n", m + 11) - m - 11);
      return true;
    }, 15));
    setenv("MLSCHED_SERVER", tls_address_.c_str(), 1);
  }
  REQUIRE(WaitFor([&] { return Tool("mlq", {"--json"}, 5).exit_code == 0; }, 15));
}

void Cluster::StopSchedd(int sig) {
  kill(schedd_, sig);
  waitpid(schedd_, nullptr, 0);
  schedd_ = -1;
}

void Cluster::StartAgent(const std::string& name, int cpus, const std::string& pool, const std::string& domain) {
  fs::create_directories(dir_ / name);
  std::vector<std::string> argv{MLSCHED_AGENTD_BIN, "--server", Server(), "--name", name, "--pool", pool, "--cpus",
                                std::to_string(cpus), "--mem", "2G", "--region", "local", "--zone", "z1", "--domain", domain,
                                "--work-dir", (dir_ / name).string(), "--address", "127.0.0.1", "--log-level", "debug"};
  // Root's jobs are refused by default (--allow-root-jobs off): the tests submit as whoever runs
  // them, root in CI, so they allow them only then.
  if (geteuid() == 0) argv.push_back("--allow-root-jobs");
  if (transport_ == Transport::kTls) {
    MakeNodeCertificate(name);
    argv.insert(argv.end(), {"--tls-cert", (TlsDir() / "nodes" / (name + ".pem")).string(), "--tls-key",
                             (TlsDir() / "nodes" / (name + ".key")).string(), "--tls-ca", (TlsDir() / "ca.pem").string()});
  }
  agents_[name] = Spawn(argv, (dir_ / (name + ".log")).string());
  REQUIRE(WaitFor([&] {
    for (const auto& n : Nodes())
      if (n.value("name", "") == name && n.value("state", "") != "DOWN") return true;
    return false;
  }, 15));
}

void Cluster::KillAgent(const std::string& name, int sig) {
  kill(agents_.at(name), sig);
  waitpid(agents_.at(name), nullptr, 0);
  agents_.erase(name);
}

RunResult Cluster::Tool(const std::string& tool, std::vector<std::string> args, int timeout_s) {
  std::string bin = tool == "mlsub" ? MLSCHED_MLSUB_BIN : tool == "mlq" ? MLSCHED_MLQ_BIN
                    : tool == "mlcancel" ? MLSCHED_MLCANCEL_BIN : MLSCHED_MLADMIN_BIN;
  std::vector<std::string> argv{bin};
  for (auto& a : args) argv.push_back(a);
  return Run(argv, timeout_s);  // the tools find schedd through MLSCHED_SERVER (set by the constructor)
}

RunResult Cluster::ToolAs(uint32_t uid, const std::string& tool, std::vector<std::string> args, int timeout_s) {
  std::string bin = tool == "mlsub" ? MLSCHED_MLSUB_BIN : tool == "mlq" ? MLSCHED_MLQ_BIN
                    : tool == "mlcancel" ? MLSCHED_MLCANCEL_BIN : MLSCHED_MLADMIN_BIN;
  std::vector<std::string> argv{"setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
                                "--clear-groups", bin};
  for (auto& a : args) argv.push_back(a);
  return Run(argv, timeout_s);
}

int64_t Cluster::Submit(std::vector<std::string> args) {
  args.insert(args.begin(), "--parsable");
  RunResult r = Tool("mlsub", args);
  INFO("mlsub stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  return std::stoll(r.out);
}

nlohmann::json Cluster::Job(int64_t id) {
  RunResult r = Tool("mlq", {"--json", "-j", std::to_string(id)});
  if (r.exit_code != 0) return nullptr;
  auto arr = nlohmann::json::parse(r.out, nullptr, false);
  if (!arr.is_array() || arr.empty()) return nullptr;
  return arr[0];
}

std::string Cluster::State(int64_t id) {
  auto j = Job(id);
  return j.is_null() ? "" : j.value("state", "");
}

bool Cluster::WaitState(int64_t id, const std::string& state, double timeout_s) {
  bool ok = WaitFor([&] { return State(id) == state; }, timeout_s);
  if (!ok) UNSCOPED_INFO("job " << id << " is " << State(id) << ", wanted " << state << "; job: " << Job(id).dump());
  return ok;
}

nlohmann::json Cluster::Nodes() {
  RunResult r = Tool("mladmin", {"nodes", "--json"});
  auto arr = nlohmann::json::parse(r.out, nullptr, false);
  return arr.is_array() ? arr : nlohmann::json::array();
}

}  // namespace mlsched::e2e
