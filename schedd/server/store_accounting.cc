// SqliteStore, the accounting side: attempts and steps (what each used), finished jobs' pages
// for mlq -a / mlacct, HA mode's history import, and retention (PurgeFinished).
#include <algorithm>
#include <memory>

#include "schedd/server/sqlite_stmt.h"
#include "schedd/server/store.h"

namespace mlsched::server {

using namespace sqlite;  // Check, Exec, Stmt, ReadJob (sqlite_stmt.h)

namespace {
const char* const kInsertAttempt =
    "INSERT OR REPLACE INTO attempts(job_id, attempt, start_time, end_time, outcome, ntasks, cpu_millis, gpus, gpu_type,"
    " pool, nodes, lost_work_s, cpu_usec, max_rss_bytes, gpu_seconds, gpu_busy_seconds, gpu_energy_joules, oom_kills,"
    " gpu_util_max, gpu_memory_max_bytes)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
void BindAttempt(Stmt& s, const AttemptRow& a) {
  s.Bind(1, a.job_id).Bind(2, a.attempt).Bind(3, a.start_time).Bind(4, a.end_time).BindText(5, a.outcome)
      .Bind(6, a.ntasks).Bind(7, a.cpu_millis).Bind(8, a.gpus).BindText(9, a.gpu_type).BindText(10, a.pool)
      .BindText(11, a.nodes).Bind(12, a.lost_work_s).Bind(13, a.cpu_usec).Bind(14, a.max_rss_bytes)
      .BindDouble(15, a.gpu_seconds).BindDouble(16, a.gpu_busy_seconds).BindDouble(17, a.gpu_energy_joules)
      .Bind(18, a.oom_kills).Bind(19, a.gpu_util_max_percent).Bind(20, a.gpu_memory_max_bytes);
}
}  // namespace

std::future<void> SqliteStore::SaveAttempt(AttemptRow a) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [a = std::move(a)](sqlite3* db) {
        Stmt s(db, kInsertAttempt, kCache);
        BindAttempt(s, a);
        s.Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

namespace {
const char* const kInsertStep =
    "INSERT OR REPLACE INTO steps(job_id, step_id, name, ntasks, nodes, uid, user, state, exit_code, start_time,"
    " end_time, cpu_usec, max_rss_bytes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)";
void BindStep(Stmt& s, const StepRow& r) {
  s.Bind(1, r.job_id).Bind(2, r.step_id).BindText(3, r.name).Bind(4, r.ntasks).BindText(5, r.nodes).Bind(6, r.uid)
      .BindText(7, r.user).BindText(8, r.state).Bind(9, r.exit_code).Bind(10, r.start_time).Bind(11, r.end_time)
      .Bind(12, r.cpu_usec).Bind(13, r.max_rss_bytes);
}
}  // namespace

std::future<void> SqliteStore::SaveStep(StepRow r) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [r = std::move(r)](sqlite3* db) {
        Stmt s(db, kInsertStep, kCache);
        BindStep(s, r);
        s.Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::vector<StepRow> SqliteStore::LoadSteps(const std::vector<int64_t>& job_ids, size_t limit) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_,
         "SELECT job_id, step_id, name, ntasks, nodes, uid, user, state, exit_code, start_time, end_time, cpu_usec,"
         " max_rss_bytes FROM steps"
         " WHERE job_id=? ORDER BY step_id");
  std::vector<StepRow> out;
  for (int64_t id : job_ids) {
    s.Reset();
    s.Bind(1, id);
    while (out.size() < limit && s.Step()) {
      StepRow r;
      r.job_id = s.Int(0);
      r.step_id = static_cast<int32_t>(s.Int(1));
      r.name = s.Blob(2);
      r.ntasks = static_cast<int32_t>(s.Int(3));
      r.nodes = s.Blob(4);
      r.uid = static_cast<uint32_t>(s.Int(5));
      r.user = s.Blob(6);
      r.state = s.Blob(7);
      r.exit_code = static_cast<int32_t>(s.Int(8));
      r.start_time = s.Int(9);
      r.end_time = s.Int(10);
      r.cpu_usec = s.Int(11);
      r.max_rss_bytes = s.Int(12);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::future<int64_t> SqliteStore::PurgeFinished(int64_t cutoff, int64_t max_jobs) {
  auto p = std::make_shared<std::promise<int64_t>>();
  auto purged = std::make_shared<int64_t>(0);
  Enqueue(
      [cutoff, max_jobs, purged](sqlite3* db) {
        Exec(db, "CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY); DELETE FROM purge_ids;");
        Stmt pick(db,
                  "INSERT INTO purge_ids SELECT id FROM jobs WHERE end_time > 0 AND end_time < ? AND state IN "
                  "('COMPLETED','FAILED','CANCELLED','TIMEOUT') ORDER BY end_time LIMIT ?");
        pick.Bind(1, cutoff).Bind(2, max_jobs).Step();
        Exec(db,
             "DELETE FROM attempts WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM events WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM steps WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM jobs WHERE id IN (SELECT id FROM purge_ids);");
        *purged = sqlite3_changes(db);
        Exec(db, "DELETE FROM purge_ids;");
      },
      [p, purged](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(*purged); });
  return p->get_future();
}

std::vector<AttemptRow> SqliteStore::LoadAttempts(int64_t start, int64_t end) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_,
         "SELECT job_id, attempt, start_time, end_time, outcome, ntasks, cpu_millis, gpus, gpu_type, pool, nodes,"
         " lost_work_s, cpu_usec, max_rss_bytes, gpu_seconds, gpu_busy_seconds, gpu_energy_joules, oom_kills,"
         " gpu_util_max, gpu_memory_max_bytes FROM attempts WHERE start_time < ? AND (end_time = 0 OR end_time >= ?) ORDER BY job_id, attempt");
  s.Bind(1, end).Bind(2, start);
  std::vector<AttemptRow> out;
  while (s.Step()) {
    AttemptRow a;
    a.job_id = s.Int(0);
    a.attempt = static_cast<int32_t>(s.Int(1));
    a.start_time = s.Int(2);
    a.end_time = s.Int(3);
    a.outcome = s.Blob(4);
    a.ntasks = static_cast<int32_t>(s.Int(5));
    a.cpu_millis = s.Int(6);
    a.gpus = s.Int(7);
    a.gpu_type = s.Blob(8);
    a.pool = s.Blob(9);
    a.nodes = s.Blob(10);
    a.lost_work_s = s.Int(11);
    a.cpu_usec = s.Int(12);
    a.max_rss_bytes = s.Int(13);
    a.gpu_seconds = s.Double(14);
    a.gpu_busy_seconds = s.Double(15);
    a.gpu_energy_joules = s.Double(16);
    a.oom_kills = s.Int(17);
    a.gpu_util_max_percent = static_cast<int32_t>(s.Int(18));
    a.gpu_memory_max_bytes = s.Int(19);
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<JobRow> SqliteStore::LoadFinishedJobs(int64_t start, int64_t end) {
  std::lock_guard lk(rmu_);
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE end_time >= ? AND end_time < ? ORDER BY id";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, start).Bind(2, end);
  std::vector<JobRow> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::vector<JobRow> SqliteStore::LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                                      const FinishedFilter& filter) {
  std::lock_guard lk(rmu_);
  // end_time > 0 for every final state (EndAttempt sets it); live jobs have 0. A user filter
  // uses the index jobs_by_user_end (one user's month among a million jobs: milliseconds).
  auto applied = [](const std::vector<std::string>& names) {
    return !names.empty() && names.size() <= FinishedFilter::kMaxFilterNames;
  };
  auto marks = [](size_t n) {
    std::string m;
    for (size_t i = 0; i < n; ++i) m += i ? ",?" : "?";
    return m;
  };
  std::string sql = std::string("SELECT ") + kJobColumns +
                    " FROM jobs WHERE id > ? AND end_time > 0 AND end_time >= ? AND state IN "
                    "('COMPLETED','FAILED','CANCELLED','TIMEOUT')";
  if (applied(filter.users)) sql += " AND user IN (" + marks(filter.users.size()) + ")";
  // Unary +: the state is checked row by row, never chosen as the index (jobs_by_state would
  // walk every FAILED job of every user).
  if (applied(filter.states)) sql += " AND +state IN (" + marks(filter.states.size()) + ")";
  sql += " ORDER BY id LIMIT ?";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, after_id).Bind(2, since);
  int i = 3;
  if (applied(filter.users))
    for (const auto& u : filter.users) s.BindText(i++, u);
  if (applied(filter.states))
    for (const auto& st : filter.states) s.BindText(i++, st);
  s.Bind(i, static_cast<int64_t>(limit));
  std::vector<JobRow> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::future<void> SqliteStore::ImportHistory(std::vector<ArchivedJob> jobs, std::vector<EventRow> events,
                                             std::string stream, std::string cursor) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [jobs = std::move(jobs), events = std::move(events), stream = std::move(stream),
       cursor = std::move(cursor)](sqlite3* db) {
        Stmt j(db,
               "INSERT OR REPLACE INTO jobs(id, spec, user, uid, gid, state, reason, submit_time, start_time, end_time,"
               " exit_code, attempt, requeue_count, placement, preempt_count, evictions, image_digest, usage)"
               " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
        Stmt a(db, kInsertAttempt);
        Stmt st(db, kInsertStep);
        for (const auto& [r, attempts, steps] : jobs) {
          for (const auto& x : steps) {
            st.Reset();
            BindStep(st, x);
            st.Step();
          }
          j.Reset();
          j.Bind(1, r.id).Bind(2, r.spec).BindText(3, r.user).Bind(4, r.uid).Bind(5, r.gid).BindText(6, r.state)
              .BindText(7, r.reason).Bind(8, r.submit_time).Bind(9, r.start_time).Bind(10, r.end_time)
              .Bind(11, r.exit_code).Bind(12, r.attempt).Bind(13, r.requeue_count).Bind(14, r.placement)
              .Bind(15, r.preempt_count).Bind(16, r.evictions).BindText(17, r.image_digest).Bind(18, r.usage);
          j.Step();
          for (const auto& x : attempts) {
            a.Reset();
            BindAttempt(a, x);
            a.Step();
          }
        }
        Stmt e(db, "INSERT INTO events(time, job_id, node, kind, detail) VALUES (?,?,?,?,?)");
        for (const auto& ev : events) {
          e.Reset();
          e.Bind(1, ev.time).Bind(2, ev.job_id).BindText(3, ev.node).BindText(4, ev.kind).BindText(5, ev.detail);
          e.Step();
        }
        Stmt c(db, "INSERT OR REPLACE INTO history_cursor(stream, cursor) VALUES (?,?)");
        c.BindText(1, stream).BindText(2, cursor).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::string SqliteStore::HistoryCursor(const std::string& stream) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT cursor FROM history_cursor WHERE stream=?");
  s.BindText(1, stream);
  if (!s.Step()) return "";
  return s.Blob(0);
}

}  // namespace mlsched::server
