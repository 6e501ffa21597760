#!/usr/bin/env bash
# The main job. On a fresh Debian 12 machine: installs dependencies, builds, starts a local cluster
# (schedd + 2 on-demand and 2 spot agents on loopback, SQLite state, an S3 object store, and a spot
# pool that grows through the local provisioning programs), submits mltrain as an elastic gang of
# 2-4 tasks with mlsub (it starts on 4 ranks), shows mlq while it trains, evicts the spot node under
# one of its ranks part-way through (`mladmin node evict`), and checks that the job shrinks at once:
# it checkpoints, resumes on 3 ranks from its latest checkpoint (not step 0), the spot pool's
# resume program starts a replacement node (spot-p1), and the job grows back to 4 ranks at a
# checkpoint, then completes with test accuracy >= DEMO_MIN_ACCURACY; the idle replacement is then
# released through the suspend program. Prints the job's event timeline, mlq --json, mladmin
# nodes, mlreport and schedd's metrics, and stops the cluster. Exits non-zero if any of that did
# not happen.
#
# Environment: DEMO_EPOCHS (default 8), DEMO_MIN_ACCURACY (default 0.88), DEMO_SKIP_SETUP=1 (no
# apt-get, no build: use MLSCHED_BUILD_DIR as is), MLSCHED_STATE (default .state/demo-PID),
# DEMO_CONTAINER=1 (the same job in an OCI image: a local registry on loopback with TLS from a test
# CA, an image of mltrain and the Debian libraries it links, pulled by every agent and run in runc).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${DEMO_SKIP_SETUP:-0}" != 1 ]; then
  # Only the demo's packages (the test command installs the rest).
  if [ "${DEMO_CONTAINER:-0}" = 1 ]; then bash scripts/install-deps.sh demo containers; else bash scripts/install-deps.sh demo; fi
  # Only what the demo runs (daemons, tools, mltrain); the test command builds the rest.
  MLSCHED_BUILD_TARGETS="schedd agentd mlsub mlq mlcancel mladmin mlacct mlreport mltrain" bash scripts/build.sh
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

# The cluster runs policies/default.toml with three demo settings: jobs may be resized after 3 s
# (default 10 min); the spot pool has elastic capacity: one more node at most, made by
# scripts/local-provision-resume (a local agentd) and released by local-provision-suspend after
# 30 s idle (Slurm power saving's ResumeProgram/SuspendProgram); and the gang watchdog is far
# keener than its defaults (a stall after 60 s, a straggler over 60 s), and must stay quiet.
POLICY_FILE="$MLSCHED_STATE/demo-policy.toml"
mkdir -p "$MLSCHED_STATE"
sed 's/^min_resize_interval = "10m"/min_resize_interval = "3s"/' policies/default.toml > "$POLICY_FILE"
grep -q '^min_resize_interval = "3s"' "$POLICY_FILE" || fail "policies/default.toml has no min_resize_interval = \"10m\" to shorten"
cat >> "$POLICY_FILE" <<EOF

# Demo: the gang watchdog, keen (its defaults: 30 min, 15 min); it must not fire on a healthy job.
[watchdog]
stall_after = "60s"
straggler_ratio = 0.5
straggler_window = "60s"

# Demo: the spot pool replaces capacity through the local provisioning programs.
[provisioning.spot]
resume_program = "$ROOT/scripts/local-provision-resume"
suspend_program = "$ROOT/scripts/local-provision-suspend"
max_nodes = 1
idle_time = "30s"             # above min_resize_interval + a restart: the replacement waits for the grow
resume_timeout = "60s"
max_cost_per_hour = 0.10      # spot cores cost 0.015 an hour: up to 3 nodes of 2 cores
cpus = 2
memory = "4G"
region = "local"
zone = "local-a"
domain = "rack-b"
root_jobs = $( [ "$(id -u)" = 0 ] && echo true || echo false )   # the demo's jobs are its user's: root's in CI
containers = $( [ "${DEMO_CONTAINER:-0}" = 1 ] && echo true || echo false )  # DEMO_CONTAINER=1: the job runs in an image
EOF
export MLSCHED_POLICY="$POLICY_FILE"

CONTAINER="${DEMO_CONTAINER:-0}"
if [ "$CONTAINER" = 1 ]; then
  DIR="$MLSCHED_STATE/images"
  mkdir -p "$DIR"
  # shellcheck source=tests/e2e/container_lib.sh
  source "$ROOT/tests/e2e/container_lib.sh"
  registry_up || fail "the local registry did not start"
  mltrain_rootfs "$DIR/rootfs" "$BIN/trainer/mltrain"
  push_image "$DIR/rootfs" mltrain:demo
  IMAGE="docker://$REGISTRY/mltrain:demo"
  say "image $IMAGE: mltrain and its libraries, $(du -sm "$DIR/rootfs" | cut -f1) MB, in a registry on loopback (TLS, test CA)"
  export MLSCHED_AGENT_ARGS="--image-cert-dir $CERTS"
  trap 'bash scripts/local-cluster.sh down >/dev/null; registry_down' EXIT
else
  trap 'bash scripts/local-cluster.sh down >/dev/null' EXIT
fi
bash scripts/local-cluster.sh up
# shellcheck disable=SC1091
source "$MLSCHED_STATE/env.sh"
"$BIN/cli/mladmin" nodes

OUT="$MLSCHED_STATE/demo-out"
mkdir -p "$OUT"
export MLTRAIN="$BIN/trainer/mltrain" DEMO_EPOCHS="$EPOCHS"
CONTAINER_OPTS=""
if [ "$CONTAINER" = 1 ]; then
  MLTRAIN=/usr/local/bin/mltrain
  mounts="$OUT:$OUT,/usr/share/datasets/fashion-mnist:/usr/share/datasets/fashion-mnist:ro"
  [ -d /usr/local/cuda ] && mounts="$mounts,/usr/local/cuda:/usr/local/cuda:ro"
  case "$MLSCHED_CHECKPOINT_URL" in file://*) mounts="$mounts,${MLSCHED_CHECKPOINT_URL#file://}:${MLSCHED_CHECKPOINT_URL#file://}" ;; esac
  CONTAINER_OPTS="#MLSUB --container-image $IMAGE
#MLSUB --container-mounts $mounts
#MLSUB --container-workdir $OUT"
fi
{ echo '#!/bin/sh'; if [ -n "$CONTAINER_OPTS" ]; then echo "$CONTAINER_OPTS"; fi; cat; } > "$OUT/train.sh" <<'JOB'
#MLSUB -J fmnist-ddp
#MLSUB -n 2-4
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
say "submitted job $JOB: mltrain, elastic gang of 2-4 tasks, $EPOCHS epochs, checkpoints to $MLSCHED_CHECKPOINT_URL/fmnist-$JOB"
LOG="$OUT/train-$JOB-0.out"
DB="$MLSCHED_STATE/db/state.db"

# Watch the job; evict a spot node under it once a checkpoint exists and training is a quarter through.
last="" evicted="" shrunk="" grown="" replacement="" state="" deadline=$((T0 + 900))
while :; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "job $JOB did not finish within 15 minutes"
  line=$("$BIN/cli/mlq" -j "$JOB" -h -o "%T|%A|%r|%N") || fail "mlq failed"
  state=${line%%|*}
  if [ "$line" != "$last" ]; then
    say "job $JOB: $line"
    "$BIN/cli/mlq" -j "$JOB"
    last=$line
  fi
  case "$state" in
    COMPLETED) break ;;
    FAILED|CANCELLED|TIMEOUT|NODE_FAIL) fail "job $JOB ended $state" ;;
  esac
  if [ -z "$evicted" ] && [ "$state" = RUNNING ]; then
    status=$(cat "$MLSCHED_STATE"/agents/*/jobs/"$JOB".*/status-0.json 2>/dev/null | tail -1 || true)
    step=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' <<<"$status")
    total=$(sed -n 's/.*"total_steps":\([0-9]*\).*/\1/p' <<<"$status")
    ckpt=$(sed -n 's/.*"last_checkpoint_step":\([0-9]*\).*/\1/p' <<<"$status")
    if [ -n "$step" ] && [ -n "$total" ] && [ "${ckpt:-0}" -gt 0 ] && [ "$step" -ge $((total / 4)) ]; then
      nodes=$("$BIN/cli/mlq" -j "$JOB" --json | tr -d '\n ' | grep -o '"nodes":\[[^]]*\]' | head -1)
      victim=$(grep -o 'spot-[0-9]*' <<<"$nodes" | head -1 || true)
      [ -n "$victim" ] || fail "job $JOB has no rank on a spot node (nodes: $nodes)"
      say "step $step of $total, last checkpoint at step $ckpt: spot eviction notice for $victim (node goes away in 10s)"
      "$BIN/cli/mladmin" node evict "$victim" --in 10s
      evicted=$victim evict_time=$(date +%s)
    fi
  fi
  if [ -n "$evicted" ] && [ -z "$shrunk" ] && grep -q 'resumed from .* on 3 ranks' "$LOG" 2>/dev/null; then
    shrunk=$(( $(date +%s) - evict_time ))
    say "shrunk: $(grep -o 'resumed from .*' "$LOG" | tail -1), ${shrunk} s after the eviction notice (no wait for a 4th node)"
  fi
  if [ -n "$evicted" ] && [ -z "$replacement" ]; then
    replacement=$(sqlite3 -readonly "$DB" "SELECT node FROM events WHERE kind = 'provision-registered' ORDER BY id LIMIT 1" 2>/dev/null || true)
    [ -n "$replacement" ] && say "the spot pool's resume program brought up $replacement; it registered"
  fi
  if [ -n "$shrunk" ] && [ -z "$grown" ] && grep -q 'resumed from .* on 4 ranks' "$LOG" 2>/dev/null; then
    grown=1
    say "grew back at a checkpoint: $(grep -o 'resumed from .*' "$LOG" | tail -1)"
  fi
  sleep 0.2
done

say "job $JOB COMPLETED"
[ -n "$evicted" ] || fail "the job finished before the eviction could be injected"
[ -n "$shrunk" ] || fail "the job did not resume on 3 ranks after the eviction"
[ -n "$replacement" ] || fail "the spot pool did not bring up a replacement node"
[ -n "$grown" ] || fail "the job did not grow back to 4 ranks on $replacement"
events=$(sqlite3 -readonly -separator '|' "$DB" "SELECT kind, detail FROM events WHERE job_id = $JOB ORDER BY id")
for kind in shrink provision resize grow; do
  grep -q "^$kind|" <<<"$events" || fail "schedd recorded no '$kind' event for job $JOB: $events"
done
echo "---- rank 0 output ($LOG) ----"
cat "$LOG"
echo "----"
grep -q 'stop requested (SIGTERM): checkpointing at step' "$LOG" || fail "rank 0 did not checkpoint on the eviction notice"
grep -q 'checkpointing at step [0-9]* (reason: resize)' "$LOG" || fail "rank 0 was not told that the grow's stop was a resize"
resumed_step=$(sed -n 's/.*resumed from .*step-0*\([0-9][0-9]*\) on 3 ranks.*/\1/p' "$LOG" | tail -1)
[ -n "$resumed_step" ] && [ "$resumed_step" -gt 0 ] || fail "attempt 2 did not resume from a checkpoint"
acc=$(sed -n 's/.*"test_accuracy": *\([0-9.]*\).*/\1/p' "$OUT/metrics-$JOB-0.json")
[ -n "$acc" ] || fail "no test accuracy in $OUT/metrics-$JOB-0.json"
awk -v a="$acc" -v m="$MIN_ACC" 'BEGIN { exit !(a >= m) }' || fail "test accuracy $acc < $MIN_ACC"

# The replacement, idle once the job is done, goes back through the suspend program after idle_time.
released=""
for _ in $(seq 1 450); do
  released=$(sqlite3 -readonly "$DB" "SELECT detail FROM events WHERE kind = 'provision-release' AND node = '$replacement'" 2>/dev/null || true)
  [ -n "$released" ] && break
  sleep 0.2
done
[ -n "$released" ] || fail "$replacement was not released within 90 s of the job's end"
say "$replacement released through the suspend program: $released"

echo; say "timeline of job $JOB (schedd's event log, $DB):"
sqlite3 -readonly -separator '  ' "$DB" \
  "SELECT datetime(time, 'unixepoch'), kind, node, detail FROM events WHERE job_id = $JOB OR kind = 'eviction'
   OR kind LIKE 'provision-%' ORDER BY id"
echo; say "attempts of job $JOB (accounting; lost work = time since the last checkpoint, 0 after a clean exit 75):"
sqlite3 -readonly -header -column "$DB" "SELECT attempt, ntasks, datetime(start_time, 'unixepoch') AS start,
  datetime(end_time, 'unixepoch') AS end, outcome, pool, nodes, lost_work_s FROM attempts WHERE job_id = $JOB"
echo; "$BIN/cli/mlq" -j "$JOB" --json
echo; say "accounting of job $JOB (mlacct, like sacct; CPU and MaxRSS from the tasks' cgroups):"
"$BIN/cli/mlacct" -j "$JOB" -o JobID,JobName,State,Attempts,Elapsed,AllocTRES,TotalCPU,CPUEff,MaxRSS ||
  fail "mlacct could not list job $JOB"
# CPU time always (cgroups, else /proc); MaxRSS where the agents have the memory controller (root).
"$BIN/cli/mlacct" -j "$JOB" -P -n -o TotalCPU | grep -E '^[0-9][0-9:.-]*$' >/dev/null ||
  fail "mlacct shows no CPU time for job $JOB: $("$BIN/cli/mlacct" -j "$JOB" -P -n -o TotalCPU,MaxRSS)"
echo; "$BIN/cli/mlacct" --efficiency "$JOB" || fail "mlacct --efficiency $JOB failed"
echo; "$BIN/cli/mladmin" nodes
echo; say "mlreport (read-only from the SQLite file):"
"$BIN/schedd/report/mlreport" --state-dir "$MLSCHED_STATE/db" --policy "${MLSCHED_POLICY:-$ROOT/policies/default.toml}"
echo; say "schedd metrics ($MLSCHED_METRICS_URL):"
scrape "$MLSCHED_METRICS_URL" | grep -E '^mlsched_(jobs|requeues_total|evictions_total|jobs_ended_total|nodes|queue_wait_seconds_(count|sum)|provision)' ||
  fail "no metrics from $MLSCHED_METRICS_URL"
agent_url=$(grep -o 'metrics on http://[^ ]*' "$MLSCHED_STATE/logs/agent-$evicted.log" | tail -1 | cut -d' ' -f3)
echo; say "agentd metrics of $evicted ($agent_url):"
scrape "$agent_url" | grep -E '^mlsched_agent_(task_exits_total|tasks_started_total|running_tasks|connected)' ||
  fail "no metrics from $agent_url"
if grep -E "collecting stack traces|: straggler " "$MLSCHED_STATE"/logs/schedd*.log >&2; then
  fail "the gang watchdog fired on the healthy demo job (lines above)"
fi
echo
say "demo passed: job $JOB trained on 4 ranks, was evicted from $evicted near step $step (last periodic checkpoint $ckpt), resumed on 3 ranks from step $resumed_step ${shrunk} s after the notice, grew back to 4 on $replacement, test accuracy $acc"
