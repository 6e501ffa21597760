#!/usr/bin/env bash
# Benchmark (issue 34; not a test): mlacct (sacct) over a store of N finished jobs (default
# 1,000,000) spread evenly over the last 30 days, from U users (default 1,000), each with one
# attempt and its accounting figures. A real schedd serves them from its SQLite store (seeded with
# sqlite3 from one real job's row); mlacct runs over its Unix socket as root (an operator).
# Prints the median wall time of 5 runs of each query, schedd's start time and its resident memory.
# Target (issue 34, point 8): one user's month <= 1 s.
# Usage: bench/server/acct_bench.sh BUILD_DIR [N] [U]
set -euo pipefail
BIN=${1:?usage: acct_bench.sh BUILD_DIR [N] [U]}
N=${2:-1000000}
U=${3:-1000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(mktemp -d /tmp/acct-bench.XXXXXX)
SOCK="$DIR/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
trap 'kill $SCHEDD 2>/dev/null || true; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$DIR"' EXIT
start_schedd() {
  "$BIN/schedd/server/schedd" --listen "unix:$SOCK" --state-dir "$DIR/db" --policy "$ROOT/policies/default.toml" \
    --metrics-port -1 >> "$DIR/schedd.log" 2>&1 &
  SCHEDD=$!
  for _ in $(seq 1 600); do "$BIN/cli/mlq" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "schedd did not start: $(tail -5 "$DIR/schedd.log")" >&2
  exit 1
}
stop_schedd() { kill "$SCHEDD"; wait "$SCHEDD" 2>/dev/null || true; }

# One real job's row (spec, user, account) to copy.
start_schedd
tmpl=$("$BIN/cli/mlsub" --parsable -H -n 1 -c 1 -t 1:00:00 --wrap 'python3 train.py --epochs 10')
"$BIN/cli/mlcancel" "$tmpl"
stop_schedd
now=$(date +%s)
t0=$(date +%s.%N)
sqlite3 "$DIR/db/state.db" >/dev/null <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < $N)
INSERT INTO jobs (id, spec, user, uid, gid, state, reason, submit_time, start_time, end_time, exit_code, attempt)
SELECT 1000 + i, (SELECT spec FROM jobs WHERE id = $tmpl), 'user' || (i % $U), 20000 + i % $U, 20000 + i % $U,
       CASE WHEN i % 7 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, '',
       $now - 2592000 + (i * 2592000) / $N - 7200, $now - 2592000 + (i * 2592000) / $N - 3600,
       $now - 2592000 + (i * 2592000) / $N, CASE WHEN i % 7 = 0 THEN 1 ELSE 0 END, 1 FROM seq;
WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < $N)
INSERT INTO attempts (job_id, attempt, start_time, end_time, outcome, ntasks, cpu_millis, gpus, gpu_type, pool, nodes,
                      cpu_usec, max_rss_bytes, gpu_seconds, gpu_busy_seconds, gpu_energy_joules, oom_kills)
SELECT 1000 + i, 1, $now - 2592000 + (i * 2592000) / $N - 3600, $now - 2592000 + (i * 2592000) / $N, 'COMPLETED', 2, 16000,
       8, 'h100', 'on-demand', 'gpu-' || (i % 500) || ',gpu-' || ((i + 1) % 500), 3600 * 8 * 1000000, 40 << 30,
       8 * 3600, 8 * 3600 * ((i % 100) / 100.0), 8 * 3600 * 400, 0 FROM seq;
COMMIT;
SQL
seeded=$(echo "$(date +%s.%N) - $t0" | bc)
db_mb=$(( $(stat -c %s "$DIR/db/state.db") / 1048576 ))
t0=$(date +%s.%N)
start_schedd
started=$(echo "$(date +%s.%N) - $t0" | bc)
rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$SCHEDD/status")
median() {  # COMMAND...: the median wall seconds of 5 runs into $T, the last run's line count into $LINES_OUT
  local times=() s
  for _ in 1 2 3 4 5; do
    s=$(date +%s.%N)
    "$@" > "$DIR/out"
    times+=("$(echo "$(date +%s.%N) - $s" | bc)")
  done
  LINES_OUT=$(wc -l < "$DIR/out")
  T=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
}
echo "store: $N finished jobs of $U users over 30 days, seeded in ${seeded} s, state.db ${db_mb} MiB"
echo "schedd: serving ${started} s after start, resident ${rss_kb} KiB"
median "$BIN/cli/mlacct" -u user7 -S now-30days -n -P
echo "mlacct -u user7 -S now-30days (one user's month): ${T} s, ${LINES_OUT} jobs"
median "$BIN/cli/mlacct" -u user7 -S now-30days -s F -n -P
echo "mlacct -u user7 -S now-30days -s F (its failures): ${T} s, ${LINES_OUT} jobs"
median "$BIN/cli/mlacct" -a -S now-1days -n -P -o JobID,User,GPUHours,GPUHoursIdle
echo "mlacct -a -S now-1days (every user's day): ${T} s, ${LINES_OUT} jobs"
median "$BIN/cli/mlacct" -j "$((1000 + N / 2))" -n -P
echo "mlacct -j ID (one job): ${T} s"
