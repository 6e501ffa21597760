#!/usr/bin/env bash
# End to end, real daemons and the trainer: QoS preemption. On the local cluster (4 agents with 2
# CPUs each) a low-QoS 2-task mltrain job runs; a high-QoS job that needs every node arrives. The
# low job is signalled, checkpoints, exits 75 and is requeued; the high job runs; then the low job
# resumes from its checkpoint (not step 0) and completes.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
cat > "$MLSCHED_STATE/policy.toml" <<'EOF'
default_qos = "low"
[backfill]
mode = "easy"
[[qos]]
name = "low"
grace_time = "30s"
[[qos]]
name = "high"
preempt = ["low"]
EOF
export MLSCHED_POLICY="$MLSCHED_STATE/policy.toml" MLSCHED_OBJECT_STORE=dir
E2E_NAME=preempt-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
OUT="$MLSCHED_STATE/out"
export MLTRAIN="$BIN/trainer/mltrain"
low=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J low -n 2 -c 2 --qos low -t 10:00 --checkpoint-interval 2s -o 'low-%j-%t.out' \
  --wrap 'exec "$MLTRAIN" --epochs 40 --threads 1 --checkpoint-url "$MLSCHED_CHECKPOINT_URL/low-$MLSCHED_JOB_ID" --checkpoint-every 2s --metrics-out "metrics-$RANK.json"')
wait_for "$low" RUNNING 30
say "low job $low running; waiting for its first checkpoint"
for _ in $(seq 1 300); do
  grep -q '"last_checkpoint_step":[1-9]' "$MLSCHED_STATE"/agents/*/jobs/"$low".1/status-0.json 2>/dev/null && break
  [ "$(field "$low" %T)" = RUNNING ] || fail "low job $low is $(field "$low" %T) before its first checkpoint (too short to preempt?)"
  sleep 0.2
done
grep -q 'checkpoint .* committed' "$OUT/low-$low-0.out" || fail "low job $low never checkpointed"

high=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J high -n 4 -c 2 --qos high -t 5:00 --spot allow -o 'high-%j-%t.out' --wrap 'sleep 3')
say "high job $high submitted (needs all 4 nodes)"
wait_for "$high" RUNNING 60
[ "$(field "$low" %T)" = PENDING ] || fail "low job $low is $(field "$low" %T) while the high job runs"
say "high job $high running; low job $low requeued: $("$BIN/cli/mlq" -j "$low" -h -o '%T %r')"
wait_for "$high" COMPLETED 60
wait_for "$low" RUNNING 30
say "low job $low running again"
wait_for "$low" COMPLETED 180
grep -q 'stop requested (SIGTERM): checkpointing at step' "$OUT/low-$low-0.out" || fail "low job did not checkpoint when preempted"
step=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\).*/\1/p' "$OUT/low-$low-0.out" | tail -1)
[ -n "$step" ] && [ "$step" -gt 0 ] || fail "low job did not resume from its checkpoint"
DB="$MLSCHED_STATE/db/state.db"
sqlite3 -readonly "$DB" "SELECT kind, detail FROM events WHERE job_id = $low ORDER BY id" | qgrep '^preempt|by job '"$high" ||
  fail "no preempt event for job $low"
sqlite3 -readonly -separator '  ' "$DB" "SELECT datetime(time, 'unixepoch'), job_id, kind, detail FROM events WHERE job_id IN ($low, $high) ORDER BY id"
sqlite3 -readonly -header -column "$DB" "SELECT job_id, attempt, outcome, lost_work_s FROM attempts WHERE job_id IN ($low, $high)"
say "passed: low job $low preempted by $high, resumed from step $step, completed"
