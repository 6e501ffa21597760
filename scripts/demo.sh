#!/usr/bin/env bash
# The main job. On a fresh Debian 12 machine: installs dependencies, builds, starts a local cluster
# (schedd + 2 on-demand and 2 spot agents on loopback, SQLite state, an S3 object store), submits
# mltrain as a 4-task gang with mlsub, shows mlq while it trains, evicts the spot node under one of
# its ranks part-way through (`mladmin node evict`), and checks that the job goes PREEMPTED ->
# PENDING -> RUNNING, resumes from its latest checkpoint (not step 0) and completes with test
# accuracy >= DEMO_MIN_ACCURACY. Then prints the job's event timeline, mlq --json, mladmin nodes,
# mlreport and schedd's metrics, and stops the cluster. Exits non-zero if any of that did not happen.
#
# Environment: DEMO_EPOCHS (default 8), DEMO_MIN_ACCURACY (default 0.88), DEMO_SKIP_SETUP=1 (no
# apt-get, no build: use MLSCHED_BUILD_DIR as is), MLSCHED_STATE (default .state/demo-PID).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${DEMO_SKIP_SETUP:-0}" != 1 ]; then
  bash scripts/install-deps.sh
  bash scripts/build.sh
fi
BIN="${MLSCHED_BUILD_DIR:-$ROOT/build}"
EPOCHS="${DEMO_EPOCHS:-8}"
MIN_ACC="${DEMO_MIN_ACCURACY:-0.88}"
export MLSCHED_BUILD_DIR="$BIN"
export MLSCHED_STATE="${MLSCHED_STATE:-$ROOT/.state/demo-$$}"
T0=$(date +%s)

# Prints the body of an HTTP GET of URL (http://HOST:PORT/PATH) using bash's /dev/tcp.
scrape() {
  local hostport=${1#http://}; hostport=${hostport%%/*}
  exec 3<>"/dev/tcp/${hostport%:*}/${hostport#*:}"
  printf 'GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n' "$hostport" >&3
  sed '1,/^\r*$/d' <&3
  exec 3>&-
}
say() { printf '[demo %4ds] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() { say "FAILED: $*" >&2; echo "logs: $MLSCHED_STATE/logs" >&2; exit 1; }

trap 'bash scripts/local-cluster.sh down >/dev/null' EXIT
bash scripts/local-cluster.sh up
# shellcheck disable=SC1091
source "$MLSCHED_STATE/env.sh"
"$BIN/cli/mladmin" nodes

OUT="$MLSCHED_STATE/demo-out"
mkdir -p "$OUT"
export MLTRAIN="$BIN/trainer/mltrain" DEMO_EPOCHS="$EPOCHS"
cat > "$OUT/train.sh" <<'JOB'
#!/bin/sh
#MLSUB -J fmnist-ddp
#MLSUB -n 4
#MLSUB -c 2
#MLSUB --mem-per-task 1G
#MLSUB -t 30:00
#MLSUB --checkpoint-interval 30s
#MLSUB -o train-%j-%t.out
# One rank per task; rendezvous, rank and world size come from the environment agentd sets.
exec "$MLTRAIN" --epochs "$DEMO_EPOCHS" --threads 1 \
  --checkpoint-url "$MLSCHED_CHECKPOINT_URL/fmnist-$MLSCHED_JOB_ID" --checkpoint-every 200 \
  --metrics-out "metrics-$MLSCHED_JOB_ID-$RANK.json"
JOB
JOB=$("$BIN/cli/mlsub" --parsable -D "$OUT" "$OUT/train.sh")
say "submitted job $JOB: mltrain, 4-task gang, $EPOCHS epochs, checkpoints to $MLSCHED_CHECKPOINT_URL/fmnist-$JOB"

# Watch the job; evict a spot node under it once a checkpoint exists and training is ~40% through.
last="" evicted="" seen_preempted=0 seen_pending_after_evict=0 resumed_running=0 state="" deadline=$((T0 + 900))
while :; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "job $JOB did not finish within 15 minutes"
  line=$("$BIN/cli/mlq" -j "$JOB" -h -o "%T|%r|%N") || fail "mlq failed"
  state=${line%%|*}
  if [ "$line" != "$last" ]; then
    say "job $JOB: $line"
    "$BIN/cli/mlq" -j "$JOB"
    last=$line
  fi
  case "$state" in
    COMPLETED) break ;;
    FAILED|CANCELLED|TIMEOUT|NODE_FAIL) fail "job $JOB ended $state" ;;
    PREEMPTED) [ -n "$evicted" ] && seen_preempted=1 ;;
    PENDING) [ -n "$evicted" ] && seen_pending_after_evict=1 ;;
    RUNNING) [ "$seen_pending_after_evict" = 1 ] && resumed_running=1 ;;
  esac
  if [ -z "$evicted" ] && [ "$state" = RUNNING ]; then
    status=$(cat "$MLSCHED_STATE"/agents/*/jobs/"$JOB".*/status-0.json 2>/dev/null | tail -1 || true)
    step=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' <<<"$status")
    total=$(sed -n 's/.*"total_steps":\([0-9]*\).*/\1/p' <<<"$status")
    ckpt=$(sed -n 's/.*"last_checkpoint_step":\([0-9]*\).*/\1/p' <<<"$status")
    if [ -n "$step" ] && [ -n "$total" ] && [ "${ckpt:-0}" -gt 0 ] && [ "$step" -ge $((total * 2 / 5)) ]; then
      nodes=$("$BIN/cli/mlq" -j "$JOB" --json | tr -d '\n ' | grep -o '"nodes":\[[^]]*\]' | head -1)
      victim=$(grep -o 'spot-[0-9]*' <<<"$nodes" | head -1 || true)
      [ -n "$victim" ] || fail "job $JOB has no rank on a spot node (nodes: $nodes)"
      say "step $step of $total, last checkpoint at step $ckpt: spot eviction notice for $victim (node goes away in 10s)"
      "$BIN/cli/mladmin" node evict "$victim" --in 10s
      evicted=$victim evict_time=$(date +%s)
    fi
  fi
  # The evicted VM is gone after its deadline; the cloud replaces it with a fresh spot VM, which
  # registers under the same name.
  if [ -n "$evicted" ] && [ -n "${evict_time:-}" ] && [ "$(date +%s)" -ge $((evict_time + 10)) ]; then
    say "spot capacity is back: $evicted replaced, returned to service"
    "$BIN/cli/mladmin" resume "$evicted"
    evict_time=""
  fi
  sleep 0.2
done

say "job $JOB COMPLETED"
[ -n "$evicted" ] || fail "the job finished before the eviction could be injected"
[ "$seen_pending_after_evict" = 1 ] && [ "$resumed_running" = 1 ] || fail "the job did not go PENDING -> RUNNING after the eviction"
DB="$MLSCHED_STATE/db/state.db"
[ "$(sqlite3 -readonly "$DB" "SELECT count(*) FROM events WHERE job_id = $JOB AND kind = 'PREEMPTED'")" -ge 1 ] ||
  fail "schedd recorded no PREEMPTED event for job $JOB"
[ "$seen_preempted" = 1 ] && say "mlq showed the job PREEMPTED while its ranks checkpointed and exited"
LOG="$OUT/train-$JOB-0.out"
echo "---- rank 0 output ($LOG) ----"
cat "$LOG"
echo "----"
grep -q 'stop requested (SIGTERM): checkpointing at step' "$LOG" || fail "rank 0 did not checkpoint on the eviction notice"
resumed_step=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\).*/\1/p' "$LOG" | tail -1)
[ -n "$resumed_step" ] && [ "$resumed_step" -gt 0 ] || fail "attempt 2 did not resume from a checkpoint"
acc=$(sed -n 's/.*"test_accuracy": *\([0-9.]*\).*/\1/p' "$OUT/metrics-$JOB-0.json")
[ -n "$acc" ] || fail "no test accuracy in $OUT/metrics-$JOB-0.json"
awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a >= m) }' || fail "test accuracy $acc < $MIN_ACC"

echo; say "timeline of job $JOB (schedd's event log, $DB):"
sqlite3 -readonly -separator '  ' "$DB" \
  "SELECT datetime(time, 'unixepoch'), kind, node, detail FROM events WHERE job_id = $JOB OR kind = 'eviction' ORDER BY id"
echo; say "attempts of job $JOB (accounting; lost work = time since the last checkpoint, 0 after a clean exit 75):"
sqlite3 -readonly -header -column "$DB" "SELECT attempt, datetime(start_time, 'unixepoch') AS start,
  datetime(end_time, 'unixepoch') AS end, outcome, pool, nodes, lost_work_s FROM attempts WHERE job_id = $JOB"
echo; "$BIN/cli/mlq" -j "$JOB" --json
echo; "$BIN/cli/mladmin" nodes
echo; say "mlreport (read-only from the SQLite file):"
"$BIN/schedd/report/mlreport" --state-dir "$MLSCHED_STATE/db" --policy "${MLSCHED_POLICY:-$ROOT/policies/default.toml}"
echo; say "schedd metrics ($MLSCHED_METRICS_URL):"
scrape "$MLSCHED_METRICS_URL" | grep -E '^mlsched_(jobs|requeues_total|evictions_total|jobs_ended_total|nodes|queue_wait_seconds_(count|sum))' ||
  fail "no metrics from $MLSCHED_METRICS_URL"
agent_url=$(grep -o 'metrics on http://[^ ]*' "$MLSCHED_STATE/logs/agent-$evicted.log" | tail -1 | cut -d' ' -f3)
echo; say "agentd metrics of $evicted ($agent_url):"
scrape "$agent_url" | grep -E '^mlsched_agent_(task_exits_total|tasks_started_total|running_tasks|connected)' ||
  fail "no metrics from $agent_url"
echo
say "demo passed: job $JOB trained on 4 ranks, was evicted from $evicted near step $step (last periodic checkpoint $ckpt), resumed from step $resumed_step, test accuracy $acc"
