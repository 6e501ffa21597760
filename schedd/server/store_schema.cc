// SqliteStore's schema: its migrations, in order (store_schema.h).
#include "schedd/server/store_schema.h"

namespace mlsched::server {

namespace {

// Schema migrations, applied in order; schema_version holds the number applied.
const char* const kMigrations[] = {
    // 1: jobs, nodes, events.
    "CREATE TABLE jobs ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT, spec BLOB NOT NULL, user TEXT NOT NULL,"
    "  uid INTEGER NOT NULL, gid INTEGER NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',"
    "  submit_time INTEGER NOT NULL, start_time INTEGER NOT NULL DEFAULT 0,"
    "  end_time INTEGER NOT NULL DEFAULT 0, exit_code INTEGER NOT NULL DEFAULT 0,"
    "  attempt INTEGER NOT NULL DEFAULT 0, requeue_count INTEGER NOT NULL DEFAULT 0, placement BLOB);"
    "CREATE INDEX jobs_by_state ON jobs(state);"
    "CREATE INDEX jobs_by_end ON jobs(end_time);"
    "CREATE TABLE nodes (name TEXT PRIMARY KEY, info BLOB, drained INTEGER NOT NULL DEFAULT 0,"
    "  reason TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL,"
    "  job_id INTEGER NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL, detail TEXT NOT NULL);"
    "CREATE INDEX events_by_job ON events(job_id);",
    // 2: accounting per launch attempt.
    "CREATE TABLE attempts (job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, start_time INTEGER NOT NULL,"
    "  end_time INTEGER NOT NULL DEFAULT 0, outcome TEXT NOT NULL DEFAULT '', ntasks INTEGER NOT NULL,"
    "  cpu_millis INTEGER NOT NULL, gpus INTEGER NOT NULL, gpu_type TEXT NOT NULL, pool TEXT NOT NULL,"
    "  nodes TEXT NOT NULL, lost_work_s INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job_id, attempt));"
    "CREATE INDEX attempts_by_end ON attempts(end_time);",
    // 3: decayed fairshare usage per association, and when it was last accrued.
    "CREATE TABLE usage (key TEXT PRIMARY KEY, value REAL NOT NULL);"
    "CREATE TABLE usage_clock (accrued_until INTEGER NOT NULL);",
    // 4: how often each job was preempted (QoS) and evicted (spot), for placement and mlq.
    "ALTER TABLE jobs ADD COLUMN preempt_count INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN evictions INTEGER NOT NULL DEFAULT 0;",
    // 5: idempotent submissions: the client's key -> the job it created (pruned after kSubmissionKeyTtl).
    "CREATE TABLE submissions (user TEXT NOT NULL, uid INTEGER NOT NULL, key TEXT NOT NULL,"
    "  job_id INTEGER NOT NULL, time INTEGER NOT NULL, PRIMARY KEY (user, uid, key));"
    "CREATE INDEX submissions_by_time ON submissions(time);",
    // 6: run-time prediction ([prediction]): each user's last run times in seconds, oldest first,
    // comma-separated (at most the policy's history, 64).
    "CREATE TABLE runtime_history (user TEXT PRIMARY KEY, runs TEXT NOT NULL);",
    // 7: HA mode's history copied out of etcd (ImportHistory): how far each stream was copied.
    "CREATE TABLE history_cursor (stream TEXT PRIMARY KEY, cursor TEXT NOT NULL);",
    // 8: the provisioner's ledger of created nodes (a serialized StoredProvisionLedger), one row.
    "CREATE TABLE provision_ledger (id INTEGER PRIMARY KEY CHECK (id = 1), ledger BLOB NOT NULL);",
    // 9: a learned run-time predictor's state ([prediction] predictor = "online-linear"), one row.
    "CREATE TABLE predictor_model (id INTEGER PRIMARY KEY CHECK (id = 1), state BLOB NOT NULL);",
    // 10: containers: the image digest a job's last attempt ran (mlq %J, show job, accounting).
    "ALTER TABLE jobs ADD COLUMN image_digest TEXT NOT NULL DEFAULT '';",
    // 11: job steps (mlrun in a running job: srun's JOB.STEP), for mlq --steps and accounting.
    "CREATE TABLE steps (job_id INTEGER NOT NULL, step_id INTEGER NOT NULL, name TEXT NOT NULL,"
    "  ntasks INTEGER NOT NULL, nodes TEXT NOT NULL, uid INTEGER NOT NULL, user TEXT NOT NULL,"
    "  state TEXT NOT NULL, exit_code INTEGER NOT NULL, start_time INTEGER NOT NULL,"
    "  end_time INTEGER NOT NULL, PRIMARY KEY (job_id, step_id));",
    // 12: accounting (issue 34): what each attempt used, from its agents' samples (AttemptUsage).
    "ALTER TABLE attempts ADD COLUMN cpu_usec INTEGER NOT NULL DEFAULT -1;"
    "ALTER TABLE attempts ADD COLUMN max_rss_bytes INTEGER NOT NULL DEFAULT -1;"
    "ALTER TABLE attempts ADD COLUMN gpu_seconds REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN gpu_busy_seconds REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN gpu_energy_joules REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN oom_kills INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN usage BLOB NOT NULL DEFAULT x'';",
    // 13: one user's finished jobs over a window (mlacct -u, sacct's common query) by index: 20 s
    // over 1 M jobs without it (bench/server/acct_bench.sh).
    "CREATE INDEX jobs_by_user_end ON jobs(user, end_time);",
    // 14: accounting peaks per attempt (the GPUs' highest utilization and memory) and what each
    // step's processes used (getrusage of their reaped tasks).
    "ALTER TABLE attempts ADD COLUMN gpu_util_max INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE attempts ADD COLUMN gpu_memory_max_bytes INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE steps ADD COLUMN cpu_usec INTEGER NOT NULL DEFAULT -1;"
    "ALTER TABLE steps ADD COLUMN max_rss_bytes INTEGER NOT NULL DEFAULT -1;",
};

}  // namespace

std::span<const char* const> SchemaMigrations() { return kMigrations; }

}  // namespace mlsched::server
