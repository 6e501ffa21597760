// Helpers of the agent's session tests (session_test.cc, ha_test.cc): the agent's test
// configuration, scheduler messages, predicates on agent messages, a log capture.
#pragma once

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "agentd/agent.h"
#include "fake_schedd.h"
#include "support.h"

namespace mlsched::agent::testing {

using namespace std::chrono_literals;

inline AgentConfig Config(const TempDir& dir) {
  AgentConfig cfg;
  cfg.servers = {"unix:" + dir.Str("schedd.sock")};
  cfg.node.name = "n1";
  cfg.node.pool = "spot";
  cfg.node.cpu_millis = 4000;
  cfg.node.memory_bytes = 8LL << 30;
  cfg.node.gpus = {{"h100", 2}};
  cfg.node.address = "127.0.0.1";
  cfg.work_dir = dir.Str("work");
  cfg.kill_grace = 2s;
  cfg.fence_grace = 500ms;
  cfg.backoff_initial = 50ms;
  cfg.backoff_max = 400ms;
  cfg.allow_root_jobs = true;  // the jobs below are the test's own uid: root's in CI
  return cfg;
}

inline v1::SchedulerMessage Prepare(const TempDir& dir, int64_t job, int32_t attempt, const std::string& cmd,
                             std::vector<std::vector<int32_t>> gpus) {
  v1::SchedulerMessage m;
  auto* p = m.mutable_prepare();
  p->set_job_id(job);
  p->set_attempt(attempt);
  p->set_user("root");
  p->set_uid(getuid());
  p->set_gid(getgid());
  p->set_world_size(static_cast<int32_t>(gpus.size()));
  p->set_local_world_size(static_cast<int32_t>(gpus.size()));
  p->set_master_addr("127.0.0.1");
  (*p->mutable_env())["MLSCHED_JOB_NAME"] = "test";
  auto* spec = p->mutable_spec();
  spec->set_name("test");
  for (const char* a : {"/bin/sh", "-c"}) spec->add_argv(a);
  spec->add_argv(cmd);
  spec->set_workdir(dir.Str());
  spec->set_stdout_pattern("job-%j-%t.out");
  for (size_t i = 0; i < gpus.size(); ++i) {
    auto* t = p->add_tasks();
    t->set_rank(static_cast<int32_t>(i));
    t->set_local_rank(static_cast<int32_t>(i));
    for (int32_t g : gpus[i]) t->add_gpu_indices(g);
  }
  return m;
}

/// A commit carrying `master_port` (schedd relays rank 0's reserved port; 29500 stands in for it).
inline v1::SchedulerMessage Commit(int64_t job, int32_t attempt, int32_t master_port = 29500) {
  v1::SchedulerMessage m;
  m.mutable_commit()->set_job_id(job);
  m.mutable_commit()->set_attempt(attempt);
  m.mutable_commit()->set_master_port(master_port);
  return m;
}

inline v1::SchedulerMessage Abort(int64_t job, int32_t attempt) {
  v1::SchedulerMessage m;
  m.mutable_abort()->set_job_id(job);
  m.mutable_abort()->set_attempt(attempt);
  m.mutable_abort()->set_reason("test");
  return m;
}

inline FakeSchedd::Pred PrepareResult(int64_t job) {
  return [=](const v1::AgentMessage& m) { return m.has_prepare_result() && m.prepare_result().job_id() == job; };
}
inline FakeSchedd::Pred Started(int64_t job, int32_t rank) {
  return [=](const v1::AgentMessage& m) {
    return m.has_task_started() && m.task_started().job_id() == job && m.task_started().rank() == rank;
  };
}
inline FakeSchedd::Pred Exited(int64_t job, int32_t rank) {
  return [=](const v1::AgentMessage& m) {
    return m.has_task_exited() && m.task_exited().job_id() == job && m.task_exited().rank() == rank;
  };
}
inline FakeSchedd::Pred Registers() {
  return [](const v1::AgentMessage& m) { return m.has_register_(); };
}

// Prepares and commits a one-rank job; returns the task's pid.
inline int32_t Launch(FakeSchedd& schedd, const TempDir& dir, int64_t job, const std::string& cmd, int32_t attempt = 1) {
  REQUIRE(schedd.Send(Prepare(dir, job, attempt, cmd, {{}})));
  auto r = schedd.WaitFor(PrepareResult(job));
  REQUIRE(r);
  REQUIRE(r->prepare_result().ok());
  REQUIRE(schedd.Send(Commit(job, attempt)));
  auto s = schedd.WaitFor(Started(job, 0));
  REQUIRE(s);
  return s->task_started().pid();
}

/// Copies everything the default logger writes, at every level, while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)), level_(spdlog::default_logger()->level()) {
    spdlog::default_logger()->sinks().push_back(sink_);
    spdlog::default_logger()->set_level(spdlog::level::trace);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    spdlog::default_logger()->set_level(level_);
  }
  std::string Text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum level_;
};

}  // namespace mlsched::agent::testing
