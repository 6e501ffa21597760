// Test fixtures for the daemon's controller: a temp state dir, a recording AgentSink, and helpers
// that play the agents' side of the protocol.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <memory>
#include <stdexcept>

#include "schedd/policy/policy_loader.h"
#include "schedd/server/controller.h"

namespace mlsched::server::testing {

/// A fresh directory under the system temp dir, removed on destruction.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("mlsched-test-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// Records every message sent to agents; nodes not in `connected` refuse messages.
struct RecordingSink : AgentSink {
  std::map<std::string, std::vector<v1::SchedulerMessage>> sent;
  std::set<std::string> disconnected;
  std::map<std::string, int64_t> heard;  // LastHeard's answer per node (0 when absent)
  int64_t LastHeard(const std::string& node, int64_t /*now*/) override {
    auto it = heard.find(node);
    return it == heard.end() ? 0 : it->second;
  }
  bool Send(const std::string& node, v1::SchedulerMessage msg) override {
    if (disconnected.count(node)) return false;
    sent[node].push_back(std::move(msg));
    return true;
  }
  /// Messages of one kind sent to a node, e.g. Of("n1", v1::SchedulerMessage::kPrepare).
  std::vector<v1::SchedulerMessage> Of(const std::string& node, v1::SchedulerMessage::MsgCase kind) const {
    std::vector<v1::SchedulerMessage> out;
    if (auto it = sent.find(node); it != sent.end())
      for (const auto& m : it->second)
        if (m.msg_case() == kind) out.push_back(m);
    return out;
  }
  void Clear() { sent.clear(); }
};

/// A policy from TOML text, named `name` in errors; throws std::runtime_error listing the errors.
inline core::PolicySet PolicyFromText(const std::string& text, const std::string& name) {
  auto r = mlsched::policy::ParsePolicy(text, name);
  if (!r.ok()) throw std::runtime_error(r.ErrorText());
  return *r.policy;
}

/// The made-up users of these tests (uid -> the first name given to it): the controller's
/// user database (ControllerConfig::user_of_uid) for the stored-row checks of Recover.
inline std::map<uint32_t, std::string>& TestUsers() {
  static std::map<uint32_t, std::string> users{{0, "root"}};
  return users;
}
inline std::string TestUserName(uint32_t uid) {
  auto it = TestUsers().find(uid);
  return it == TestUsers().end() ? "uid" + std::to_string(uid) : it->second;
}

/// A controller over a fresh store in a temp dir with a recording sink; tests derive their
/// worlds from it and call Start with their policy.
struct ControllerWorld {
  TempDir dir;
  std::unique_ptr<SqliteStore> store = std::make_unique<SqliteStore>(dir.path.string());
  RecordingSink sink;
  ControllerConfig cfg = [] {
    ControllerConfig c;
    c.user_of_uid = TestUserName;
    return c;
  }();
  std::unique_ptr<Controller> ctl;
  int64_t now = 1'000'000;
  void Start(core::PolicySet policy) { ctl = std::make_unique<Controller>(*store, sink, std::move(policy), cfg); }
  /// schedd dies (or another replica takes over): the store is closed (its writes flushed) and
  /// opened again, the messages sent so far forgotten, and a new controller recovers at `at`.
  void RestartController(int64_t at, core::PolicySet policy = {}) {
    ctl.reset();
    store.reset();
    store = std::make_unique<SqliteStore>(dir.path.string());
    sink.Clear();
    Start(std::move(policy));
    ctl->Recover(at);
  }
};

/// "kind|detail" (with_node: "kind|node|detail") of every event of `job` (0: node events), in
/// order, read from the store's SQLite file in `dir` (events are durable once AppendEvent returns).
inline std::vector<std::string> EventsOf(const TempDir& dir, int64_t job, bool with_node = false) {
  std::vector<std::string> out;
  sqlite3* db = nullptr;
  const std::string path = (dir.path / "state.db").string();
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT kind, node, detail FROM events WHERE job_id = ? ORDER BY id", -1, &st, nullptr) ==
          SQLITE_OK);
  sqlite3_bind_int64(st, 1, job);
  while (sqlite3_step(st) == SQLITE_ROW) {
    auto text = [&](int c) {
      const unsigned char* t = sqlite3_column_text(st, c);
      return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
    };
    out.push_back(text(0) + "|" + (with_node ? text(1) + "|" : "") + text(2));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

/// Whether `events` (EventsOf) holds `e` exactly.
inline bool HasEvent(const std::vector<std::string>& events, const std::string& e) {
  return std::find(events.begin(), events.end(), e) != events.end();
}

/// QoS "low" (the default; grace 30 s) and "high", which may preempt it.
inline core::PolicySet LowHighQosPolicy() {
  core::PolicySet policy;
  core::QosPolicy low, high;
  low.name = "low";
  low.grace_time = 30;
  high.name = "high";
  high.preempt = {"low"};
  policy.qos = {low, high};
  policy.default_qos = "low";
  return policy;
}

inline v1::RegisterNode NodeReg(const std::string& name, int cpus, int gpus = 0, const std::string& gpu_type = "h100") {
  v1::RegisterNode r;
  r.set_name(name);
  r.set_pool(v1::POOL_ON_DEMAND);
  r.set_address("127.0.0.1");
  r.mutable_capacity()->set_cpu_millis(cpus * 1000);
  r.mutable_capacity()->set_memory_bytes(int64_t{16} << 30);
  if (gpus > 0) {
    auto* g = r.mutable_capacity()->add_gpus();
    g->set_type(gpu_type);
    g->set_count(gpus);
  }
  return r;
}

inline v1::JobSpec Spec(int ntasks, int cpus = 1, int gpus = 0) {
  v1::JobSpec s;
  s.set_ntasks(ntasks);
  s.set_cpu_millis_per_task(cpus * 1000);
  s.set_gpus_per_task(gpus);
  s.add_argv("/bin/true");
  s.set_workdir("/tmp");
  return s;
}

inline Caller User(const std::string& name, uint32_t uid, bool privileged = false) {
  TestUsers().emplace(uid, name);
  return Caller{name, uid, uid, privileged};
}

/// A privileged caller (sees every job's details).
inline Caller Root() { return User("root", 0, true); }

/// Every page of Controller::List (at `now`; finished jobs of the default window), concatenated.
inline std::vector<v1::JobInfo> ListAll(Controller& ctl, const Caller& who, v1::ListJobsRequest req,
                                        int64_t now = 1'000'000) {
  std::vector<v1::JobInfo> out;
  for (int pages = 0; pages < 10000; ++pages) {
    v1::ListJobsResponse resp;
    REQUIRE(ctl.List(who, req, now, &resp).ok());
    for (auto& j : *resp.mutable_jobs()) out.push_back(std::move(j));
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  return out;
}

inline v1::AgentMessage PrepareOk(int64_t job, int32_t attempt) {
  v1::AgentMessage m;
  m.mutable_prepare_result()->set_job_id(job);
  m.mutable_prepare_result()->set_attempt(attempt);
  m.mutable_prepare_result()->set_ok(true);
  return m;
}

inline v1::AgentMessage Exited(int64_t job, int32_t attempt, int32_t rank, int32_t code) {
  v1::AgentMessage m;
  m.mutable_task_exited()->set_job_id(job);
  m.mutable_task_exited()->set_attempt(attempt);
  m.mutable_task_exited()->set_rank(rank);
  m.mutable_task_exited()->set_exit_code(code);
  return m;
}

inline v1::AgentMessage Started(int64_t job, int32_t attempt, int32_t rank) {
  v1::AgentMessage m;
  m.mutable_task_started()->set_job_id(job);
  m.mutable_task_started()->set_attempt(attempt);
  m.mutable_task_started()->set_rank(rank);
  m.mutable_task_started()->set_pid(1000 + rank);
  return m;
}

inline v1::AgentMessage Heartbeat(std::vector<std::tuple<int64_t, int32_t, int32_t>> running) {
  v1::AgentMessage m;
  m.mutable_heartbeat()->set_time(0);
  for (auto [job, attempt, rank] : running) {
    auto* r = m.mutable_heartbeat()->add_running();
    r->set_job_id(job);
    r->set_attempt(attempt);
    r->set_rank(rank);
  }
  return m;
}

/// `nodes` agents of `cpus` CPUs each (n1, n2, ...), the default policy; alice submits.
struct NodesWorld : ControllerWorld {
  Caller alice = User("alice", 1001);

  explicit NodesWorld(int nodes = 3, int cpus = 4) {
    cfg.heartbeat_timeout_s = 30;
    Start(core::PolicySet{});
    for (int i = 1; i <= nodes; ++i) ctl->OnRegister(NodeReg("n" + std::to_string(i), cpus), now);
  }
  int64_t Submit(v1::JobSpec spec, Caller who) {
    int64_t id = 0;
    Status st = ctl->Submit(who, spec, now, &id);
    REQUIRE(st.ok());
    return id;
  }
  v1::JobInfo Job(int64_t id) {
    v1::JobInfo info;
    REQUIRE(ctl->Get(Root(), id, &info).ok());
    return info;
  }
  // Acknowledges every prepare sent so far and starts every committed task.
  /// Answers every Prepare sent so far with success, then reports each of its ranks started;
  /// `prepared_at` / `started_at` are the agents' times (-1 = now).
  void PrepareAndStartAll(int64_t prepared_at = -1, int64_t started_at = -1) {
    if (prepared_at < 0) prepared_at = now;
    if (started_at < 0) started_at = std::max(now, prepared_at);
    for (auto& [node, msgs] : std::map(sink.sent)) {
      for (const auto& m : msgs) {
        if (m.has_prepare())
          ctl->OnAgentMessage(node, PrepareOk(m.prepare().job_id(), m.prepare().attempt()), prepared_at);
      }
    }
    for (auto& [node, msgs] : std::map(sink.sent)) {
      for (const auto& m : msgs) {
        if (!m.has_prepare()) continue;
        for (const auto& t : m.prepare().tasks())
          ctl->OnAgentMessage(node, Started(m.prepare().job_id(), m.prepare().attempt(), t.rank()), started_at);
      }
    }
  }
};

}  // namespace mlsched::server::testing
