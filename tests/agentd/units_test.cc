// Pure helpers: output patterns, task environment, GPU names and flags, server addresses.
#include <catch2/catch.hpp>

#include <algorithm>

#include "agentd/node_info.h"
#include "agentd/orphans.h"
#include "agentd/patterns.h"
#include "agentd/task_env.h"

using namespace mlsched::agent;

TEST_CASE("output patterns expand Slurm's specifiers", "[patterns]") {
  PatternValues v{42, 3, "alice", "train", "gpu-01", 0, 0};
  CHECK(*ExpandOutputPattern("slurm-%j.out", v).value == "slurm-42.out");
  CHECK(*ExpandOutputPattern("%x-%j-%t.%u@%n", v).value == "train-42-3.alice@gpu-01");
  CHECK(*ExpandOutputPattern("100%%-%5j-%3t", v).value == "100%-00042-003");
  CHECK(*ExpandOutputPattern("plain", v).value == "plain");
  auto bad = ExpandOutputPattern("out-%q", v);
  CHECK_FALSE(bad);
  CHECK(bad.error.find("unknown specifier %q") != std::string::npos);
  CHECK_FALSE(ExpandOutputPattern("out-%", v));
  CHECK(*ExpandOutputPattern("%A_%a", v).value == "42_0");  // not an array element
  PatternValues element{45, 0, "alice", "sweep", "gpu-01", 40, 5};
  CHECK(*ExpandOutputPattern("%x-%A_%3a.out", element).value == "sweep-40_005.out");
}

TEST_CASE("array elements see MLSCHED_ARRAY_* and SLURM_ARRAY_*", "[env]") {
  TaskEnvInput in;
  in.job_id = 45;
  CHECK(BuildTaskEnvironment(in).count("MLSCHED_ARRAY_TASK_ID") == 0);
  in.array_job_id = 40;
  in.array_task_id = 5;
  in.array_task_count = 10;
  in.array_task_min = 0;
  in.array_task_max = 9;
  auto env = BuildTaskEnvironment(in);
  CHECK(env.at("MLSCHED_ARRAY_JOB_ID") == "40");
  CHECK(env.at("MLSCHED_ARRAY_TASK_ID") == "5");
  CHECK(env.at("SLURM_ARRAY_TASK_ID") == "5");
  CHECK(env.at("SLURM_ARRAY_TASK_COUNT") == "10");
  CHECK(env.at("MLSCHED_ARRAY_TASK_MAX") == "9");
  CHECK(env.at("MLSCHED_JOB_ID") == "45");
}

TEST_CASE("output paths resolve against the working directory", "[patterns]") {
  PatternValues v{7, 0, "bob", "job", "n1", 0, 0};
  CHECK(*ResolveOutputPath("", "mlsched-%j.out", v, "/home/bob").value == "/home/bob/mlsched-7.out");
  CHECK(*ResolveOutputPath("logs/%t.log", "x", v, "/w").value == "/w/logs/0.log");
  CHECK(*ResolveOutputPath("/abs/%j", "x", v, "/w").value == "/abs/7");
  CHECK_FALSE(ResolveOutputPath("%%%", "x", v, "/w"));
}

TEST_CASE("task environment: rendezvous variables override the exported environment", "[env]") {
  TaskEnvInput in;
  in.spec_env = {{"RANK", "99"}, {"PATH", "/opt/bin"}, {"MY_VAR", "x"}, {"MLSCHED_JOB_NAME", "old"}};
  in.scheduler_env = {{"MLSCHED_JOB_NAME", "train"}};
  in.job_id = 12;
  in.attempt = 2;
  in.rank = 5;
  in.local_rank = 1;
  in.world_size = 8;
  in.local_world_size = 4;
  in.master_addr = "10.0.0.1";
  in.master_port = 29500;
  in.gpu_indices = {2, 3};
  in.node = "gpu-01";
  in.status_file = "/w/jobs/12.2/status-5.json";
  in.user = "alice";
  in.home = "/home/alice";
  auto env = BuildTaskEnvironment(in);
  CHECK(env["RANK"] == "5");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["MASTER_ADDR"] == "10.0.0.1");
  CHECK(env["MASTER_PORT"] == "29500");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "2,3");
  CHECK(env["MLSCHED_JOB_ID"] == "12");
  CHECK(env["MLSCHED_TASK_ID"] == "5");
  CHECK(env["MLSCHED_ATTEMPT"] == "2");
  CHECK(env["MLSCHED_NODE"] == "gpu-01");
  CHECK(env["MLSCHED_STATUS_FILE"] == "/w/jobs/12.2/status-5.json");
  CHECK(env["MLSCHED_JOB_NAME"] == "train");
  CHECK(env["PATH"] == "/opt/bin");
  CHECK(env["MY_VAR"] == "x");
  CHECK(env["HOME"] == "/home/alice");
  CHECK(env["USER"] == "alice");

  in.gpu_indices.clear();
  in.spec_env.clear();
  env = BuildTaskEnvironment(in);
  CHECK(env.count("CUDA_VISIBLE_DEVICES") == 1);
  CHECK(env["CUDA_VISIBLE_DEVICES"].empty());
  CHECK(env["PATH"] == kDefaultTaskPath);
  auto strings = ToEnvStrings({{"A", "1"}, {"B=C", "2"}, {"D", ""}});
  CHECK(strings == std::vector<std::string>{"A=1", "D="});
}

TEST_CASE("task environment: the rendezvous token comes from the scheduler only", "[env]") {
  TaskEnvInput in;
  in.spec_env = {{"MLSCHED_RENDEZVOUS_TOKEN", "exported-with-the-job-so-mlq-shows-it"}};
  CHECK(BuildTaskEnvironment(in).count("MLSCHED_RENDEZVOUS_TOKEN") == 0);
  in.scheduler_env = {{"MLSCHED_RENDEZVOUS_TOKEN", "not-from-prepare-env-either"}};
  CHECK(BuildTaskEnvironment(in).count("MLSCHED_RENDEZVOUS_TOKEN") == 0);
  in.rendezvous_token = std::string(64, 'a');
  CHECK(BuildTaskEnvironment(in)["MLSCHED_RENDEZVOUS_TOKEN"] == std::string(64, 'a'));
}

TEST_CASE("task environment: MASTER_PORT and MLSCHED_RENDEZVOUS_FD come from the agent's commit only", "[env]") {
  TaskEnvInput in;
  in.spec_env = {{"MASTER_PORT", "20000"}, {"MLSCHED_RENDEZVOUS_FD", "3"}};  // exported with the job
  auto env = BuildTaskEnvironment(in);
  CHECK(env.count("MASTER_PORT") == 0);
  CHECK(env.count("MLSCHED_RENDEZVOUS_FD") == 0);
  std::vector<std::string> strings = ToEnvStrings(env);
  AddCommitEnvironment(&strings, 41234, 17);
  CHECK(std::count(strings.begin(), strings.end(), "MASTER_PORT=41234") == 1);
  CHECK(std::count(strings.begin(), strings.end(), "MLSCHED_RENDEZVOUS_FD=17") == 1);
  AddCommitEnvironment(&strings, 41235, -1);  // replaced, never doubled; no socket: no variable
  CHECK(std::count_if(strings.begin(), strings.end(), [](const std::string& s) { return s.rfind("MASTER_PORT=", 0) == 0; }) == 1);
  CHECK(std::count(strings.begin(), strings.end(), "MASTER_PORT=41235") == 1);
  CHECK(std::none_of(strings.begin(), strings.end(), [](const std::string& s) { return s.rfind("MLSCHED_RENDEZVOUS_FD=", 0) == 0; }));
  AddCommitEnvironment(&strings, 70000, -1);  // out of range: unset rather than wrong
  CHECK(std::none_of(strings.begin(), strings.end(), [](const std::string& s) { return s.rfind("MASTER_PORT=", 0) == 0; }));
}

TEST_CASE("GPU model names from nvidia-smi", "[node]") {
  CHECK(GpuTypeFromName("NVIDIA H100 80GB HBM3") == "h100");
  CHECK(GpuTypeFromName("NVIDIA A100-SXM4-80GB") == "a100");
  CHECK(GpuTypeFromName("Tesla V100-SXM2-16GB") == "v100");
  CHECK(GpuTypeFromName("NVIDIA L4") == "l4");
  CHECK(GpuTypeFromName("NVIDIA GeForce RTX 4090") == "rtx4090");
  CHECK(GpuTypeFromName("NVIDIA RTX A6000") == "a6000");
  CHECK(GpuTypeFromName("NVIDIA H200") == "h200");
  auto groups = GroupGpuNames({"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA L4"});
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].type == "h100");
  CHECK(groups[0].count == 2);
  CHECK(groups[1].type == "l4");
}

TEST_CASE("GPU flag: TYPE:N entries", "[node]") {
  auto g = ParseGpuFlag({"h100:8", "A100:2,l4:1"});
  REQUIRE(g);
  REQUIRE(g.value->size() == 3);
  CHECK((*g.value)[1].type == "a100");
  CHECK((*g.value)[1].count == 2);
  NodeIdentity n;
  n.gpus = *g.value;
  CHECK(n.GpuCount() == 11);
  CHECK(ParseGpuFlag({"none"}).value->empty());
  auto bad = ParseGpuFlag({"h100"});
  CHECK_FALSE(bad);
  CHECK(bad.error.find("'h100'") != std::string::npos);
  CHECK_FALSE(ParseGpuFlag({"h100:x"}));
  CHECK_FALSE(ParseGpuFlag({"h100:-1"}));
}

TEST_CASE("loopback servers get 127.0.0.1 as MASTER_ADDR default", "[node]") {
  CHECK(IsLoopbackServer("unix:/run/mlsched/schedd.sock"));
  CHECK(IsLoopbackServer("localhost:7000"));
  CHECK(IsLoopbackServer("127.0.0.1:7000"));
  CHECK(IsLoopbackServer("[::1]:7000"));
  CHECK_FALSE(IsLoopbackServer("sched.example.com:7000"));
  CHECK_FALSE(IsLoopbackServer("10.1.2.3:7000"));
  CHECK(IsValidPool("spot"));
  CHECK_FALSE(IsValidPool("preemptible"));
}

TEST_CASE("orphans are attributed to tasks by their inherited environment", "[node]") {
  using namespace std::string_literals;
  auto key = TaskFromEnviron("PATH=/bin\0MLSCHED_JOB_ID=12\0MLSCHED_ATTEMPT=3\0MLSCHED_TASK_ID=5\0"s);
  REQUIRE(key);
  CHECK(*key == TaskKey{12, 3, 5});
  CHECK_FALSE(TaskFromEnviron("MLSCHED_JOB_ID=12\0MLSCHED_ATTEMPT=3\0"s));
  CHECK_FALSE(TaskFromEnviron("MLSCHED_JOB_ID=x\0MLSCHED_ATTEMPT=3\0MLSCHED_TASK_ID=5"s));
  CHECK_FALSE(TaskFromEnviron(""));
}
