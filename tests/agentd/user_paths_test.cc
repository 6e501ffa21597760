// Root never looks at the user's paths (issue 29): prepare checks only their form; the working
// directory, the command's PATH search and the output files are resolved by the task after it
// became the user. So a user learns nothing from root's view (a path under /root that exists and
// one that does not fail alike), and a wrong directory fails the launch once instead of failing
// every prepare (which schedd requeued forever).
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>

#include "agentd/launch_plan.h"
#include "agentd/launcher.h"
#include "agentd/task_env.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kNobody = 65534;

v1::Prepare OneRank(const std::string& workdir, const std::string& command) {
  v1::Prepare p;
  p.set_job_id(31);
  p.set_attempt(1);
  p.set_user("nobody");
  p.set_uid(kNobody);
  p.set_gid(kNobody);
  p.set_world_size(1);
  p.set_local_world_size(1);
  p.set_master_addr("127.0.0.1");
  p.mutable_spec()->add_argv(command);
  p.mutable_spec()->set_workdir(workdir);
  p.add_tasks()->set_rank(0);
  return p;
}

PlanContext Ctx(const TempDir& dir) {
  PlanContext ctx;
  ctx.node = "n1";
  ctx.work_dir = dir.Str("work");
  ctx.agent_uid = kNobody;  // a planner's view only: nothing here depends on who runs the test
  return ctx;
}

/// A request that runs `cmd` (searched on PATH) as nobody in `workdir`, writing to `out`.
LaunchRequest AsNobody(const std::string& workdir, const std::string& cmd, const std::string& out) {
  LaunchRequest r;
  r.executable = cmd;
  r.search_path = "/usr/bin:/bin";
  r.argv = {cmd};
  r.env = {"PATH=/usr/bin:/bin"};
  r.workdir = workdir;
  r.stdout_path = out;
  r.stderr_path = out;
  r.switch_user = true;
  r.uid = kNobody;
  r.gid = kNobody;
  return r;
}

}  // namespace

TEST_CASE("prepare never looks at the user's paths: a missing directory, output directory or command still plans",
          "[plan][user-paths]") {
  TempDir dir;
  auto p = OneRank("/nonexistent-" + std::to_string(getpid()) + "/work", "no-such-command-xyz");
  p.mutable_spec()->set_stdout_pattern("/nonexistent/logs/%j.out");
  auto plan = PlanAttempt(p, Ctx(dir));
  INFO(plan.error);
  REQUIRE(plan);
  const LaunchRequest& r = plan.value->ranks[0].request;
  CHECK(r.workdir == p.spec().workdir());
  CHECK(r.executable == "no-such-command-xyz");  // searched by the task, as its user
  CHECK(r.search_path == kDefaultTaskPath);
  CHECK(r.stdout_path == "/nonexistent/logs/31.out");

  p.mutable_spec()->set_argv(0, "bin/train");  // a relative command is the working directory's
  plan = PlanAttempt(p, Ctx(dir));
  REQUIRE(plan);
  CHECK(plan.value->ranks[0].request.executable == p.spec().workdir() + "/bin/train");
  CHECK(plan.value->ranks[0].request.search_path.empty());

  p.mutable_spec()->set_workdir("data");  // only the form is checked
  plan = PlanAttempt(p, Ctx(dir));
  REQUIRE_FALSE(plan);
  CHECK(plan.error == "working directory 'data' is not an absolute path");
}

TEST_CASE("as the user: an unreachable working directory fails alike whether or not it exists", "[process][user-paths]") {
  if (geteuid() != 0) {
    WARN("SKIPPED: switching to uid 65534 needs root");
    return;
  }
  TempDir dir;
  fs::permissions(dir.path, fs::perms(0755));
  const fs::path secret = dir.path / "root-only";  // like /root: 0700, root's
  fs::create_directories(secret / "existing");
  fs::permissions(secret, fs::perms::owner_all);
  const std::string out = dir.Str("out.txt");

  SpawnResult there = SpawnTask(AsNobody((secret / "existing").string(), "true", out));
  SpawnResult absent = SpawnTask(AsNobody((secret / "missing").string(), "true", out));
  REQUIRE(there.pid <= 0);
  REQUIRE(absent.pid <= 0);
  CHECK(there.failure.exit_code == 127);
  CHECK(absent.failure.exit_code == 127);
  CHECK(there.failure.error == "chdir to working directory " + (secret / "existing").string() + ": Permission denied");
  // The same words but for the path the user gave: nothing tells which of the two exists.
  CHECK(std::regex_replace(there.failure.error, std::regex("existing"), "X") ==
        std::regex_replace(absent.failure.error, std::regex("missing"), "X"));
  CHECK_FALSE(fs::exists(out));  // nothing was created for a task that never entered its directory
  CHECK_FALSE(fs::exists(secret / "missing"));

  // Output files are opened as the user too (after the chdir), and its PATH is searched as the user.
  fs::create_directories(dir.path / "open");
  fs::permissions(dir.path / "open", fs::perms::all);
  SpawnResult out_hidden = SpawnTask(AsNobody(dir.Str("open"), "true", (secret / "existing/out.txt").string()));
  REQUIRE(out_hidden.pid <= 0);
  CHECK(out_hidden.failure.error == "open stdout file " + (secret / "existing/out.txt").string() + ": Permission denied");
  CHECK_FALSE(fs::exists(secret / "existing/out.txt"));
}

TEST_CASE("the task searches its PATH itself, as execvp does", "[process][user-paths]") {
  TempDir dir;
  LaunchRequest r;
  r.executable = "sh";
  r.search_path = dir.Str("no-such-dir") + "::/bin:/usr/bin";  // missing entries are skipped
  r.argv = {"sh", "-c", "echo found"};
  r.workdir = dir.Str();
  r.stdout_path = r.stderr_path = dir.Str("out.txt");
  SpawnResult ok = SpawnTask(r);
  REQUIRE(ok.pid > 0);
  int status = 0;
  REQUIRE(waitpid(ok.pid, &status, 0) == ok.pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(ReadFile(dir.Str("out.txt")) == "found\n");

  r.executable = "no-such-command-xyz";
  r.argv = {"no-such-command-xyz"};
  r.search_path = "/bin:/usr/bin";
  SpawnResult missing = SpawnTask(r);
  REQUIRE(missing.pid <= 0);
  CHECK(missing.failure.exit_code == 127);
  CHECK(missing.failure.error == "command 'no-such-command-xyz' not found on PATH (/bin:/usr/bin)");

  std::ofstream(dir.Str("not-executable")) << "#!/bin/sh\necho no\n";
  r.executable = "not-executable";
  r.argv = {"not-executable"};
  r.search_path = dir.Str();
  SpawnResult denied = SpawnTask(r);
  REQUIRE(denied.pid <= 0);
  CHECK(denied.failure.exit_code == 126);
  CHECK_THAT(denied.failure.error, Catch::Contains("Permission denied"));
}
