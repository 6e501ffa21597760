#!/usr/bin/env bash
# End to end, real daemons: exactly-once under controller crashes (issue 14, test e). Three clients
# submit short one-task jobs (each appends "JOBID ATTEMPT" to runs/JOBID) while schedd is killed
# with SIGKILL and restarted, again and again: at random moments, and (failpoint
# MLSCHED_FAILPOINT=crash-before-report:N) right after it has read an agent's report and before
# the report's effect is durable, the window random kills rarely hit. Afterwards:
#   - every acknowledged job id exists and is COMPLETED        (nothing acknowledged is lost)
#   - the store holds exactly as many jobs as were acknowledged (no retry created a duplicate)
#   - every job's runs file has exactly one line               (nothing started twice)
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped);
# CRASH_CLIENTS, CRASH_JOBS (per client) and CRASH_KILLS (least rounds of crashes) to scale it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
CLIENTS=${CRASH_CLIENTS:-3} JOBS=${CRASH_JOBS:-50} KILLS=${CRASH_KILLS:-5}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out/runs"
E2E_NAME=crash-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
OUT="$MLSCHED_STATE/out"

# schedd's command line, with the TLS port it got pinned so that agents and clients find it again.
pid=$(cat "$MLSCHED_STATE/pids/schedd")
mapfile -d '' cmd < "/proc/$pid/cmdline"
port=${MLSCHED_SERVER##*:}
for i in "${!cmd[@]}"; do [ "${cmd[$i]}" = 127.0.0.1:0 ] && cmd[$i]=127.0.0.1:$port; done
start_schedd() {  # [failpoint]: starts schedd (with MLSCHED_FAILPOINT set when given)
  env ${1:+MLSCHED_FAILPOINT=$1} setsid "${cmd[@]}" >>"$MLSCHED_STATE/logs/schedd.log" 2>&1 < /dev/null &
  echo $! > "$MLSCHED_STATE/pids/schedd"
  disown
  [ -n "${1:-}" ] && return 0  # an armed schedd may die before it answers
  for _ in $(seq 1 100); do "$BIN/cli/mlq" -h -o %i >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "schedd did not come back"
}
kill_schedd() {
  local pid
  pid=$(cat "$MLSCHED_STATE/pids/schedd")
  kill -9 "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
}
crash_and_restart() {  # a SIGKILL at a random moment, then one inside the report window
  kill_schedd
  local n=$(( (RANDOM % 12) + 2 )) pid
  start_schedd "crash-before-report:$n"
  pid=$(cat "$MLSCHED_STATE/pids/schedd")
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then say "the failpoint did not fire within 10 s"; kill_schedd; else fired=$((fired + 1)); fi
  start_schedd
}

submit_all() {  # client number: submits JOBS jobs, appends each acknowledged id to acked.N
  local c=$1 i id
  for i in $(seq 1 "$JOBS"); do
    id=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J "c$c-$i" -n 1 -c 1 -t 2:00 -o /dev/null \
      --wrap 'echo "$MLSCHED_JOB_ID $MLSCHED_ATTEMPT" >> "runs/$MLSCHED_JOB_ID"; sleep 1.$((RANDOM % 10))') ||
      { echo "client $c: submission $i failed" >&2; continue; }
    echo "$id" >> "$OUT/acked.$c"
  done
}
export MLSCHED_RETRY=60  # the CLI retry budget: longer than any restart below
clients=()
for c in $(seq 1 "$CLIENTS"); do submit_all "$c" & clients+=($!); done
# Crash rounds while the clients submit (so reports keep coming), at least KILLS of them.
running() { local p; for p in "${clients[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
k=0 fired=0
while [ "$k" -lt "$KILLS" ] || running; do
  sleep "$(( RANDOM % 2 )).$((RANDOM % 10))"
  crash_and_restart
  k=$((k + 1))
  say "round $k: schedd killed with SIGKILL at random and at a failpoint ($fired fired so far), restarted"
done
wait "${clients[@]}"  # not `wait`: the restarted schedd is a child of this shell too
acked=$(cat "$OUT"/acked.* | sort -n)
n_acked=$(wc -l <<<"$acked")
[ "$n_acked" -eq $((CLIENTS * JOBS)) ] || fail "only $n_acked of $((CLIENTS * JOBS)) submissions were acknowledged"
[ "$(sort -u <<<"$acked" | wc -l)" -eq "$n_acked" ] || fail "two submissions were acknowledged with the same job id"
say "$n_acked submissions acknowledged through $k rounds of crashes; waiting for every job to finish"
deadline=$(( $(date +%s) + 240 ))
while :; do
  left=$("$BIN/cli/mlq" -t PD,R,CG -h -o '%i %T' | wc -l)
  [ "$left" -eq 0 ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "$left job(s) still pending or running"
  sleep 1
done
DB="$MLSCHED_STATE/db/state.db"
stored=$(sqlite3 -readonly "$DB" "SELECT count(*) FROM jobs")
[ "$stored" -eq "$n_acked" ] || fail "the store holds $stored jobs for $n_acked acknowledged submissions (duplicates)"
lost=0 twice=0 not_done=0
for id in $acked; do
  state=$(sqlite3 -readonly "$DB" "SELECT state FROM jobs WHERE id = $id")
  [ "$state" = COMPLETED ] || { not_done=$((not_done + 1)); say "job $id is ${state:-missing}"; }
  [ -f "$OUT/runs/$id" ] || { lost=$((lost + 1)); say "job $id never ran"; continue; }
  [ "$(wc -l < "$OUT/runs/$id")" -eq 1 ] || { twice=$((twice + 1)); say "job $id ran more than once: $(tr '\n' ' ' < "$OUT/runs/$id")"; }
done
say "acknowledged $n_acked, stored $stored, not completed $not_done, never ran $lost, ran twice $twice"
[ "$not_done" -eq 0 ] && [ "$lost" -eq 0 ] && [ "$twice" -eq 0 ] || fail "exactly-once violated"
[ "$fired" -gt 0 ] || fail "the failpoint never fired: the report window was not tested"
say "passed: $((k + fired)) SIGKILLs of schedd ($fired inside the report window), $n_acked jobs, 0 lost, 0 duplicated, 0 run twice"
