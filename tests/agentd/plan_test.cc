// Prepare-time validation (PlanAttempt) and device reservations (AttemptTable).
#include <catch2/catch.hpp>

#include <filesystem>

#include "agentd/attempts.h"
#include "agentd/launch_plan.h"
#include "agentd/safe_files.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;

namespace {

v1::Prepare MakePrepare(const TempDir& dir, int64_t job, std::vector<std::vector<int32_t>> gpus) {
  v1::Prepare p;
  p.set_job_id(job);
  p.set_attempt(1);
  p.set_user("root");
  p.set_uid(getuid());
  p.set_gid(getgid());
  p.set_world_size(static_cast<int32_t>(gpus.size()));
  p.set_local_world_size(static_cast<int32_t>(gpus.size()));
  p.set_master_addr("127.0.0.1");
  auto* spec = p.mutable_spec();
  spec->set_name("train");
  spec->add_argv("sh");
  spec->add_argv("-c");
  spec->add_argv("true");
  spec->set_workdir(dir.Str());
  spec->set_stdout_pattern("%x-%j-%t.out");
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto* t = p.add_tasks();
    t->set_rank(static_cast<int32_t>(i));
    t->set_local_rank(static_cast<int32_t>(i));
    for (int32_t g : gpus[i]) t->add_gpu_indices(g);
  }
  return p;
}

PlanContext Ctx(const TempDir& dir) {
  PlanContext ctx{"n1", dir.Str("work"), false, 4, 0, {}};
  ctx.agent_uid = getuid();    // the jobs below are the test's own uid ...
  ctx.allow_root_jobs = true;  // ... which is root in CI
  return ctx;
}

std::string EnvOf(const PlannedRank& r, const std::string& key) {
  for (const auto& kv : r.request.env)
    if (kv.rfind(key + "=", 0) == 0) return kv.substr(key.size() + 1);
  return "<unset>";
}

}  // namespace

TEST_CASE("a valid prepare becomes launch requests", "[plan]") {
  TempDir dir;
  auto plan = PlanAttempt(MakePrepare(dir, 12, {{0, 1}, {2}}), Ctx(dir));
  REQUIRE(plan);
  REQUIRE(plan.value->ranks.size() == 2);
  const auto& r1 = plan.value->ranks[1];
  CHECK(r1.request.executable == "sh");  // searched on the task's PATH by the task itself
  CHECK(r1.request.search_path == "/usr/local/bin:/usr/bin:/bin");
  CHECK(r1.request.argv == std::vector<std::string>{"sh", "-c", "true"});
  CHECK(r1.request.stdout_path == dir.Str("train-12-1.out"));
  CHECK(r1.request.stderr_path == r1.request.stdout_path);
  CHECK(r1.request.workdir == dir.Str());
  CHECK(EnvOf(r1, "CUDA_VISIBLE_DEVICES") == "2");
  CHECK(EnvOf(plan.value->ranks[0], "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(EnvOf(r1, "RANK") == "1");
  CHECK(EnvOf(r1, "MASTER_PORT") == "<unset>");  // the commit's (AddCommitEnvironment)
  CHECK(EnvOf(r1, "MLSCHED_STATUS_FILE") == dir.Str("work/jobs/12.1/status-1.json"));
  CHECK(EnvOf(r1, "MLSCHED_STOP_REASON_FILE") == dir.Str("work/jobs/12.1.stop-reason"));
  CHECK(plan.value->dir == dir.Str("work/jobs/12.1"));
  CHECK(plan.value->script.empty());
}

TEST_CASE("each rank's limits: the per-task request, the agent's pids limit, the other ranks' GPUs denied", "[plan]") {
  TempDir dir;
  auto p = MakePrepare(dir, 13, {{0, 1}, {3}});
  p.mutable_spec()->set_memory_bytes_per_task(int64_t{4} << 30);
  p.mutable_spec()->set_cpu_millis_per_task(2500);
  auto ctx = Ctx(dir);
  ctx.task_pids_max = 4096;
  ctx.gpu_devices = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"};
  auto plan = PlanAttempt(p, ctx);
  REQUIRE(plan);
  const auto& l0 = plan.value->ranks[0].request.limits;
  CHECK(l0.memory_bytes == int64_t{4} << 30);
  CHECK(l0.cpu_millis == 2500);
  CHECK(l0.pids_max == 4096);
  CHECK(l0.deny_devices == std::vector<std::string>{"/dev/nvidia2", "/dev/nvidia3"});
  CHECK(plan.value->ranks[1].request.limits.deny_devices ==
        std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"});
}

TEST_CASE("every rank's environment, and nothing else in the plan, carries the rendezvous token", "[plan]") {
  TempDir dir;
  const std::string token = "5eed" + std::string(60, 'e');
  auto p = MakePrepare(dir, 14, {{0}, {1}});
  p.set_rendezvous_token(token);
  auto plan = PlanAttempt(p, Ctx(dir));
  REQUIRE(plan);
  for (const auto& r : plan.value->ranks) {
    CHECK(EnvOf(r, "MLSCHED_RENDEZVOUS_TOKEN") == token);
    // What the agent logs about a task (executable, argv, paths) never holds it.
    std::string shown = r.request.executable + r.request.workdir + r.request.stdout_path + r.request.stderr_path;
    for (const auto& a : r.request.argv) shown += a;
    CHECK(shown.find(token) == std::string::npos);
  }
  CHECK((plan.value->dir + plan.value->script).find(token) == std::string::npos);
  p.clear_rendezvous_token();
  auto without = PlanAttempt(p, Ctx(dir));
  REQUIRE(without);
  CHECK(EnvOf(without.value->ranks[0], "MLSCHED_RENDEZVOUS_TOKEN") == "<unset>");
}

TEST_CASE("a batch script is written to the attempt directory", "[plan]") {
  TempDir dir;
  auto p = MakePrepare(dir, 13, {{}});
  p.mutable_spec()->clear_argv();
  p.mutable_spec()->set_script("echo no shebang\n");
  auto plan = PlanAttempt(p, Ctx(dir));
  REQUIRE(plan);
  CHECK(plan.value->ranks[0].request.executable == "/bin/sh");
  CHECK(plan.value->ranks[0].request.argv[1] == dir.Str("work/jobs/13.1/script"));
  std::filesystem::create_directories(dir.Str("work/jobs"));  // the agent makes it at start (only the attempt dir is made per job)
  REQUIRE(WriteAttemptFiles(*plan.value).empty());
  CHECK(ReadFile(dir.Str("work/jobs/13.1/script")) == "echo no shebang\n");

  p.mutable_spec()->set_script("#!/bin/bash\necho hi\n");
  plan = PlanAttempt(p, Ctx(dir));
  REQUIRE(plan);
  CHECK(plan.value->ranks[0].request.executable == dir.Str("work/jobs/13.1/script"));
  RemoveAttemptFiles(plan.value->dir);
  CHECK_FALSE(std::filesystem::exists(dir.Str("work/jobs/13.1")));
}

TEST_CASE("prepare validation names what is wrong", "[plan]") {
  TempDir dir;
  auto expect_error = [&](const v1::Prepare& p, const std::string& fragment) {
    auto plan = PlanAttempt(p, Ctx(dir));
    REQUIRE_FALSE(plan);
    INFO(plan.error);
    CHECK(plan.error.find(fragment) != std::string::npos);
  };
  auto p = MakePrepare(dir, 1, {{4}});
  expect_error(p, "GPU index 4 does not exist (node has 4 GPUs)");
  p = MakePrepare(dir, 1, {{1}, {1}});
  expect_error(p, "GPU index 1 assigned to two ranks");
  p = MakePrepare(dir, 1, {{}});
  p.mutable_spec()->set_workdir("relative/dir");
  expect_error(p, "working directory 'relative/dir' is not an absolute path");
  p = MakePrepare(dir, 1, {{}});
  p.mutable_spec()->set_argv(0, "");
  expect_error(p, "the job's command (argv[0]) is empty");
  p = MakePrepare(dir, 1, {{}});
  p.mutable_spec()->clear_argv();
  expect_error(p, "neither a command (argv) nor a batch script");
  p = MakePrepare(dir, 1, {{}});
  p.mutable_spec()->set_stderr_pattern("%z");
  expect_error(p, "unknown specifier %z");
  p = MakePrepare(dir, 1, {});
  expect_error(p, "lists no tasks");
  p = MakePrepare(dir, 1, {{}});
  p.mutable_spec()->mutable_container()->set_image("docker://docker.io/library/busybox:latest");
  expect_error(p, "job runs in container image 'docker://docker.io/library/busybox:latest', but agentd on node");
  p = MakePrepare(dir, 1, {{}});
  p.set_user("no-such-user-xyz");
  p.set_uid(54321);
  auto root_ctx = Ctx(dir);
  root_ctx.agent_is_root = true;
  auto plan = PlanAttempt(p, root_ctx);
  REQUIRE_FALSE(plan);
  CHECK(plan.error == "user 'no-such-user-xyz' (uid 54321) does not exist on this node");
}

TEST_CASE("devices stay reserved from prepare until the rank exits", "[plan]") {
  TempDir dir;
  AttemptTable table;
  auto a = PlanAttempt(MakePrepare(dir, 20, {{0}, {1}}), Ctx(dir));
  auto b = PlanAttempt(MakePrepare(dir, 21, {{1}}), Ctx(dir));
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(table.Reserve(*a.value).empty());
  CHECK(table.Reserve(*a.value).empty());  // idempotent
  CHECK(table.Reserve(*b.value) == "GPU 1 is held by job 20 attempt 1 rank 1");

  auto commit = table.Commit({20, 1});
  CHECK(commit.known);
  CHECK(commit.launch.size() == 2);
  CHECK(table.Commit({20, 1}).launch.empty());  // repeated commit starts nothing
  CHECK_FALSE(table.Commit({99, 1}).known);
  CHECK(table.LiveTasks({20, 1}).size() == 2);

  CHECK_FALSE(table.RankExited({20, 1, 1}));  // rank 0 still alive
  CHECK(table.Reserve(*b.value).empty());     // GPU 1 is free again
  auto dir20 = table.RankExited({20, 1, 0});
  REQUIRE(dir20);
  CHECK(*dir20 == dir.Str("work/jobs/20.1"));
  CHECK(table.Known({20, 1}));  // remembered as finished: a late commit is not an error
  CHECK(table.Commit({20, 1}).known);
  CHECK(table.Commit({20, 1}).launch.empty());

  // Fencing: prepared attempts without a kept rank are dropped.
  CHECK(table.PreparedNotIn({}) == std::vector<AttemptKey>{{21, 1}});
  CHECK(table.PreparedNotIn({{21, 1, 0}}).empty());
  REQUIRE(table.DropPrepared({21, 1}));
  CHECK(table.HeldGpus().empty());
}

TEST_CASE("the stop reason is written next to the attempt directory and removed with it", "[plan][elastic]") {
  TempDir dir;
  std::filesystem::create_directories(dir.Str("work/jobs/12.1"));
  const std::string attempt = dir.Str("work/jobs/12.1");
  REQUIRE(WriteStopReason(attempt, "resize").empty());
  std::string text;
  REQUIRE(ReadRegularFileAt(dir.Str("work/jobs"), "12.1.stop-reason", kMaxStopReasonBytes + 1, &text).empty());
  CHECK(text == "resize\n");
  REQUIRE(WriteStopReason(attempt, "eviction").empty());  // replaced whole
  REQUIRE(ReadRegularFileAt(dir.Str("work/jobs"), "12.1.stop-reason", kMaxStopReasonBytes + 1, &text).empty());
  CHECK(text == "eviction\n");
  CHECK_FALSE(WriteStopReason(attempt, "").empty());
  CHECK_FALSE(WriteStopReason(attempt, "../x").empty());
  CHECK_FALSE(WriteStopReason(attempt, std::string(kMaxStopReasonBytes + 1, 'a')).empty());
  RemoveAttemptFiles(attempt);
  CHECK_FALSE(std::filesystem::exists(attempt));
  CHECK_FALSE(std::filesystem::exists(StopReasonPath(attempt)));
  // A stale one found at start (agentd removes every entry of jobs/ it finds) goes alone.
  REQUIRE(WriteStopReason(dir.Str("work/jobs/13.2"), "eviction").empty());
  RemoveAttemptFiles(dir.Str("work/jobs/13.2.stop-reason"));
  CHECK_FALSE(std::filesystem::exists(dir.Str("work/jobs/13.2.stop-reason")));
}

TEST_CASE("jobs of uid 0 run only with --allow-root-jobs", "[plan][root-jobs]") {
  TempDir dir;
  auto p = MakePrepare(dir, 50, {{}});
  p.set_user("root");
  p.set_uid(0);
  p.set_gid(0);
  auto ctx = Ctx(dir);
  ctx.agent_is_root = true;
  ctx.agent_uid = 0;
  ctx.allow_root_jobs = false;
  auto plan = PlanAttempt(p, ctx);
  REQUIRE_FALSE(plan);
  CHECK(plan.error == "jobs of uid 0 (root) do not run on node n1: its agentd was started without --allow-root-jobs "
                      "(root jobs are off by default, as Slurm's DisableRootJobs)");
  ctx.allow_root_jobs = true;
  plan = PlanAttempt(p, ctx);
  REQUIRE(plan);
  CHECK_FALSE(plan.value->ranks[0].request.switch_user);  // root's job, as root
  // Whatever name comes with it: uid 0 is root.
  p.set_user("alice");
  CHECK_FALSE(PlanAttempt(p, [&] { auto c = ctx; c.allow_root_jobs = false; return c; }()));
}

TEST_CASE("an agent that is not root runs only its own uid's jobs, unless --single-user", "[plan][single-user]") {
  TempDir dir;
  auto p = MakePrepare(dir, 51, {{}});
  p.set_user("alice");
  p.set_uid(1001);
  p.set_gid(1001);
  auto ctx = Ctx(dir);
  ctx.agent_is_root = false;
  ctx.agent_uid = 4242;
  auto plan = PlanAttempt(p, ctx);
  REQUIRE_FALSE(plan);
  CHECK(plan.error == "job of uid 1001 refused: agentd on node n1 runs as uid 4242, not root, so it could only run the "
                      "job as uid 4242 (start it as root, or with --single-user for a one-user cluster)");
  p.set_uid(4242);  // its own user's job
  REQUIRE(PlanAttempt(p, ctx));
  p.set_uid(1001);
  ctx.single_user = true;  // a one-user cluster: every job runs as the agent's user
  plan = PlanAttempt(p, ctx);
  REQUIRE(plan);
  CHECK_FALSE(plan.value->ranks[0].request.switch_user);
  p.set_uid(0);  // root's job still needs --allow-root-jobs
  ctx.allow_root_jobs = false;
  CHECK_THAT(PlanAttempt(p, ctx).error, Catch::Contains("--allow-root-jobs"));
}
