#!/usr/bin/env bash
# End to end, real daemons and the trainer: an elastic gang shrinks and grows (issue 16). On the
# local cluster (2 on-demand and 2 spot agents, 2 CPUs each: one rank per node) mltrain runs as
# `mlsub -n 3-4`. Once it has checkpointed, the spot node under one rank is evicted: the ranks
# checkpoint and exit 75, and the job restarts at once on the 3 nodes left (WORLD_SIZE 3, "resumed
# ... on 3 ranks"). The node is returned to service; after [elastic] min_resize_interval the job is
# asked to checkpoint with the stop reason "resize" and grows back to 4 ranks, then completes. Its
# final test loss and accuracy match an uninterrupted 1-rank run of the same training (the data
# order and the global batch do not depend on the world size; only fp summation order does).
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
cat > "$MLSCHED_STATE/policy.toml" <<'EOF'
[backfill]
mode = "easy"
[elastic]
min_resize_interval = "3s"
restart_cost = "1s"
EOF
export MLSCHED_POLICY="$MLSCHED_STATE/policy.toml" MLSCHED_OBJECT_STORE=dir
E2E_NAME=elastic-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
OUT="$MLSCHED_STATE/out"
export MLTRAIN="$BIN/trainer/mltrain"
# Small and short: 16,000 training samples (125 steps of 128 per epoch), 2,000 test samples.
export TRAIN_ARGS="--epochs ${ELASTIC_E2E_EPOCHS:-24} --threads 1 --train-limit 16000 --test-limit 2000 --checkpoint-every 1s"
job=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J elastic -n 3-4 -c 2 -t 10:00 --checkpoint-interval 1s -o 'el-%j-%t.out' \
  --wrap 'exec "$MLTRAIN" $TRAIN_ARGS --checkpoint-url "$MLSCHED_CHECKPOINT_URL/el-$MLSCHED_JOB_ID" --metrics-out "metrics-$RANK.json"')
wait_for "$job" RUNNING 30
[ "$(field "$job" %A)" = "4/3-4" ] || fail "job $job started with $(field "$job" %A) tasks, not 4/3-4"
say "job $job running on 4 ranks; waiting for its first checkpoint"
for _ in $(seq 1 300); do
  grep -q '"last_checkpoint_step":[1-9]' "$MLSCHED_STATE"/agents/*/jobs/"$job".1/status-0.json 2>/dev/null && break
  [ "$(field "$job" %T)" = RUNNING ] || fail "job $job is $(field "$job" %T) before its first checkpoint"
  sleep 0.1
done
victim=$("$BIN/cli/mlq" -j "$job" --json | tr -d '\n ' | grep -o '"nodes":\[[^]]*\]' | grep -o 'spot-[0-9]*' | head -1 || true)
[ -n "$victim" ] || fail "job $job has no rank on a spot node"
t_evict=$(date +%s.%N)
"$BIN/cli/mladmin" node evict "$victim" --in 10s >/dev/null
say "evicted $victim (notice: 10 s)"
LOG="$OUT/el-$job-0.out"
# Attempt 2: 3 ranks, at once (no waiting for a 4th node).
for _ in $(seq 1 300); do
  grep -q 'resumed from .* on 3 ranks' "$LOG" 2>/dev/null && break
  case "$(field "$job" %T)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) fail "job $job ended before resuming on 3 ranks";; esac
  sleep 0.1
done
grep -q 'resumed from .* on 3 ranks' "$LOG" || fail "job $job did not resume on 3 ranks within 30 s"
t_resumed=$(date +%s.%N)
resume_s=$(awk -v a="$t_evict" -v b="$t_resumed" 'BEGIN { printf "%.1f", b - a }')
[ "$(field "$job" %A)" = "3/3-4" ] || fail "job $job runs with $(field "$job" %A) tasks after the eviction, not 3/3-4"
say "job $job resumed on 3 ranks ${resume_s} s after the eviction notice: $(grep -o 'resumed from .*' "$LOG" | tail -1)"
"$BIN/cli/mlq" --explain "$job" | qgrep "Resized: *shrunk 4->3 after eviction of $victim" ||
  fail "mlq --explain does not show the shrink: $("$BIN/cli/mlq" --explain "$job")"
"$BIN/cli/mladmin" resume "$victim" >/dev/null
say "$victim returned to service; waiting for the grow back to 4 ranks"
for _ in $(seq 1 400); do
  grep -q 'resumed from .* on 4 ranks' "$LOG" 2>/dev/null && break
  case "$(field "$job" %T)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) fail "job $job ended before growing back to 4 ranks";; esac
  sleep 0.1
done
grep -q 'resumed from .* on 4 ranks' "$LOG" || fail "job $job did not grow back to 4 ranks within 40 s"
grep -q 'stop requested (SIGTERM): checkpointing at step [0-9]* (reason: resize)' "$LOG" ||
  fail "the trainer was not told the stop was a resize"
say "job $job grew back: $(grep -o 'resumed from .*' "$LOG" | tail -1)"
wait_for "$job" COMPLETED 120
t_done=$(date +%s)

DB="$MLSCHED_STATE/db/state.db"
events=$(sqlite3 -readonly -separator '|' "$DB" "SELECT kind, detail FROM events WHERE job_id = $job ORDER BY id")
echo "$events" | qgrep "^shrink|shrunk 4->3 after eviction of $victim\$" || fail "no shrink event: $events"
echo "$events" | qgrep '^grow|grew 3->4 after resize' || fail "no grow event: $events"
echo "$events" | qgrep '^resize|to 4 tasks from 3' || fail "no resize decision event: $events"
[ "$(field "$job" %w)" = "0/1" ] || fail "job $job counts preemptions/evictions $(field "$job" %w), expected 0/1 (a resize is no preemption)"
sqlite3 -readonly -separator '  ' "$DB" "SELECT datetime(time, 'unixepoch'), kind, node, detail FROM events WHERE job_id = $job ORDER BY id"
sqlite3 -readonly -header -column "$DB" "SELECT attempt, ntasks, outcome, nodes, lost_work_s FROM attempts WHERE job_id = $job"

# The same training uninterrupted on 1 rank, for the trajectory check. Tolerance: summation order
# differs with the world size, and Adam amplifies it; uninterrupted runs on 1 and on 4 ranks end
# 0.1 % apart in test loss (0.3673 vs 0.3677), a run resized 4->3->4 usually within 0.3 % of both,
# but where the resizes fall moves with the machine's load: a CI rehearsal on 2 busy cores ended
# 1.01 % below the reference (0.3660 vs 0.3697). The bound here is 1.5 % (loss) and 1 point
# (accuracy), with the step count checked exactly.
REF="$MLSCHED_STATE/ref"
mkdir -p "$REF"
# shellcheck disable=SC2086
"$MLTRAIN" $TRAIN_ARGS --checkpoint-url "file://$REF/ckpt" --metrics-out "$REF/metrics.json" > "$REF/out.log" 2>&1 ||
  fail "the reference run failed: $(tail -3 "$REF/out.log")"
metric() { sed -n "s/.*\"$2\": *\\([0-9.e+-]*\\).*/\\1/p" "$1"; }
loss=$(metric "$OUT/metrics-0.json" test_loss) acc=$(metric "$OUT/metrics-0.json" test_accuracy)
[ "$(metric "$OUT/metrics-0.json" world_size)" = 4 ] || fail "the last attempt did not run with WORLD_SIZE 4"
steps=$(metric "$OUT/metrics-0.json" steps)
[ "$steps" = $(( ${ELASTIC_E2E_EPOCHS:-24} * 125 )) ] || fail "the job ended at step $steps"
ref_loss=$(metric "$REF/metrics.json" test_loss) ref_acc=$(metric "$REF/metrics.json" test_accuracy)
[ -n "$loss" ] && [ -n "$ref_loss" ] || fail "missing test_loss (job: '$loss', reference: '$ref_loss')"
say "test loss $loss (uninterrupted 1 rank: $ref_loss), accuracy $acc ($ref_acc)"
awk -v a="$loss" -v b="$ref_loss" -v x="$acc" -v y="$ref_acc" \
  'BEGIN { d = a - b; if (d < 0) d = -d; e = x - y; if (e < 0) e = -e; exit !(d <= 0.015 * b && e <= 0.01) }' ||
  fail "the trajectory differs from the uninterrupted run beyond tolerance (loss $loss vs $ref_loss, accuracy $acc vs $ref_acc)"
say "passed: shrink 4->3 ${resume_s} s after the eviction, grow 3->4, trajectory matches; $(( t_done - T0 )) s to completion"
