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

Cluster::Cluster(const std::string& policy_toml) {
  Init();
  policy_file_ = (dir_ / "policy.toml").string();
  std::ofstream(policy_file_) << policy_toml;
  StartSchedd();
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
  if (!getenv("MLSCHED_KEEP_E2E")) fs::remove_all(dir_);
}

void Cluster::StartSchedd() {
  std::vector<std::string> argv{MLSCHED_SCHEDD_BIN, "--listen", "unix:" + (dir_ / "schedd.sock").string(), "--state-dir",
                                (dir_ / "state").string(), "--heartbeat-interval", "1", "--heartbeat-timeout", "4",
                                "--kill-grace", "2", "--requeue-backoff", "1", "--cycle-interval-ms", "200",
                                "--log-level", "debug"};
  if (!policy_file_.empty()) argv.insert(argv.end(), {"--policy", policy_file_});
  schedd_ = Spawn(argv, (dir_ / "schedd.log").string());
  REQUIRE(WaitFor([&] { return Tool("mlq", {"--json"}, 5).exit_code == 0; }, 15));
}

void Cluster::StopSchedd(int sig) {
  kill(schedd_, sig);
  waitpid(schedd_, nullptr, 0);
  schedd_ = -1;
}

void Cluster::StartAgent(const std::string& name, int cpus, const std::string& pool, const std::string& domain) {
  fs::create_directories(dir_ / name);
  agents_[name] = Spawn({MLSCHED_AGENTD_BIN, "--server", Server(), "--name", name, "--pool", pool, "--cpus",
                         std::to_string(cpus), "--mem", "2G", "--region", "local", "--zone", "z1", "--domain", domain,
                         "--work-dir", (dir_ / name).string(), "--address", "127.0.0.1", "--log-level", "debug"},
                        (dir_ / (name + ".log")).string());
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
