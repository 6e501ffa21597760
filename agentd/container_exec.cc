#include "agentd/container_exec.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstring>

#include "agentd/container_tools.h"

namespace mlsched::agent {

namespace {

using json = nlohmann::json;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The file at `path`, at most `limit` bytes (a config.json agentd wrote; bounded all the same).
std::optional<std::string> ReadSmall(const std::string& path, size_t limit) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0 || out.size() + static_cast<size_t>(n) > limit) {
      close(fd);
      if (n < 0 || out.size() + static_cast<size_t>(std::max<ssize_t>(n, 0)) > limit) return std::nullopt;
      return out;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

bool WriteFile0600(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

constexpr size_t kMaxConfigBytes = 16 << 20;

}  // namespace

Parsed<std::string> ExecProcessJson(const std::string& config_json, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env, bool pty, uint32_t rows, uint32_t cols) {
  Parsed<std::string> out;
  json config = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object() || !config.contains("process") || !config["process"].is_object()) {
    out.error = "the container's config.json has no process";
    return out;
  }
  json p = config["process"];
  p["args"] = argv;
  std::vector<std::string> vars;
  if (p.contains("env") && p["env"].is_array())
    for (const auto& v : p["env"])
      if (v.is_string()) vars.push_back(v.get<std::string>());
  for (const auto& kv : env) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    std::erase_if(vars, [&](const std::string& have) { return have.rfind(name, 0) == 0; });
    vars.push_back(kv);
  }
  p["env"] = vars;
  p["terminal"] = pty;
  p.erase("consoleSize");
  if (pty && rows > 0 && cols > 0) p["consoleSize"] = {{"height", rows}, {"width", cols}};
  out.value = p.dump();
  return out;
}

std::string PlanContainerExec(const ContainerExecSite& site, const ExecRequest& want, ExecPlan* plan) {
  // A task reported started may still be in `runc run`'s creation: wait for its state, a while.
  const std::string state = site.runc_root + "/" + site.container_id + "/state.json";
  for (int i = 0; i < 200 && access(state.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (access(state.c_str(), F_OK) != 0) return "the task's container " + site.container_id + " is not running (yet)";
  const auto config = ReadSmall(site.bundle_dir + "/config.json", kMaxConfigBytes);
  if (!config) return Errno("read " + site.bundle_dir + "/config.json");
  auto process = ExecProcessJson(*config, want.session.argv, want.env, want.pty, want.rows, want.cols);
  if (!process) return process.error;
  // A name of its own per session: the session's stdio pipes' read end is unique to it.
  static std::atomic<uint64_t> serial{0};
  const std::string process_path = site.bundle_dir + "/exec-" + std::to_string(getpid()) + "-" + std::to_string(++serial) + ".json";
  if (!WriteFile0600(process_path, *process.value)) return Errno("write " + process_path);
  LaunchRequest r = want.session;
  r.container.reset();
  r.exec_as_root = true;
  r.controlling_tty = false;  // runc makes the container's terminal; the host pty is nobody's terminal
  r.executable = site.runc;
  r.search_path.clear();
  r.inherit_fd.reset();
  r.argv = {site.runc, "--root", site.runc_root, "--log", site.log_path, "exec", "--process", process_path, site.container_id};
  r.env = {"PATH=" + std::string(kContainerToolPath)};
  plan->request = std::move(r);
  plan->cleanup = [process_path] { unlink(process_path.c_str()); };
  return "";
}

}  // namespace mlsched::agent
