#!/usr/bin/env bash
# Scale benchmark (issue 30; a benchmark, not a test): one schedd (SQLite on its Unix socket) and
# NODES hollow nodes (bench/server/hollow_agents: real agent protocol, tasks without processes),
# then JOBS one-task jobs submitted as job arrays of at most 10,000 elements, each running
# TASK_SECONDS (default 1). Prints one line:
#   nodes=N registered=N register_s=S jobs=J placed=P wall_s=W place_rate=R/s p50_start_ms=A
#   p99_start_ms=B rss_mb=M threads=T idle_cpu_pct=C down=D
# registered/register_s: nodes registered and how long that took; placed: jobs that ever started
# (RUNNING or ended COMPLETED), each counted once; wall_s: from the first submission until every
# job has started; place_rate = placed / wall_s; start times are submit -> start of the first
# attempt (schedd keeps seconds: the figures are whole seconds, in ms); rss_mb and threads of
# schedd once every job has started; idle_cpu_pct: schedd's CPU over 10 s with every node
# heartbeating and no job (before the submissions); down: nodes DOWN at the end (should be 0).
#   bash bench/server/scale_bench.sh BUILD_DIR NODES JOBS [--cpus N] [--task-seconds S]
#                                    [--heartbeat-interval S] [--nodes-per-process N] [--check]
#                                    [--pending P] [--ramp]
# --check: exit 1 unless every node registered, every job started exactly once and completed,
# and no node went DOWN (the scale smoke test in CI uses it).
# --ramp: the hollow processes start one at a time, each once the previous one's nodes registered,
# with a line per step: nodes so far, how long the step took, schedd's CPU over 10 s, nodes DOWN
# (register_s then includes those 10 s pauses).
# --pending P: then a backlog of P held one-task jobs (mlsub --hold, as arrays) and a second line:
#   pending=P submit_s=S backlog_rss_mb=M backlog_cpu_pct=C mlq_job_ms=A mlq_page_ms=B mlq_all_ms=C
#   nodes_ms=D gang64_p50_ms=E gang64_max_ms=F restart_to_start_s=R
# backlog_cpu_pct: schedd's CPU over 10 s with the backlog and every node heartbeating; mlq_job_ms:
# `mlq -j ID`, mlq_page_ms: `mlq --max-jobs 100`, mlq_all_ms: the whole listing (P jobs), nodes_ms:
# `mladmin nodes` (each the best of 3, wall time of the CLI); gang64: 10 gangs of 64 one-CPU tasks
# submitted one after another, submit -> RUNNING as seen by polling mlq every 20 ms; restart: schedd
# is stopped (SIGTERM) and started on the same state, and the time runs from the stop until a job
# submitted as soon as schedd answers is RUNNING.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,32p' "$0" >&2; exit 2; }
BIN=$(cd "$1" && pwd) NODES=$2 JOBS=$3
shift 3
CPUS=32 TASK_S=1 HB=5 CHECK=0 PER_PROCESS=250 PENDING=0 RAMP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cpus) CPUS=$2; shift 2 ;;
    --task-seconds) TASK_S=$2; shift 2 ;;
    --heartbeat-interval) HB=$2; shift 2 ;;
    --check) CHECK=1; shift ;;
    --nodes-per-process) PER_PROCESS=$2; shift 2 ;;
    --pending) PENDING=$2; shift 2 ;;
    --ramp) RAMP=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $PENDING =~ ^[0-9]+$ ]] || { echo "--pending takes a count" >&2; exit 2; }
[[ $NODES =~ ^[0-9]+$ && $JOBS =~ ^[0-9]+$ && $PER_PROCESS =~ ^[0-9]+$ && $NODES -ge 1 && $JOBS -ge 1 && $PER_PROCESS -ge 1 ]] || { echo "NODES and JOBS are positive integers" >&2; exit 2; }
STATE=$(mktemp -d /tmp/mlsched-scale.XXXXXX)
SOCK="$STATE/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -n "${KEEP_STATE:-}" ] && echo "state kept in $STATE" >&2 || rm -rf "$STATE"
}
trap cleanup EXIT

start_schedd() {
  "$BIN/schedd/server/schedd" --listen "unix:$SOCK" --state-dir "$STATE/db" --heartbeat-interval "$HB" \
    --heartbeat-timeout $((HB * 6)) --max-array-size 10000 --log-level warn >>"$STATE/schedd.log" 2>&1 &
  SCHEDD=$!
  pids+=("$SCHEDD")
}
start_schedd
for _ in $(seq 1 100); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$SCHEDD/stat"; }
t0=$(date +%s.%N)
# The nodes are spread over processes of at most PER_PROCESS hollow nodes (kubemark runs many
# hollow pods): one process holds its nodes' connections, outboxes, job files and reserved
# rendezvous ports, and the open-file limit (often 20,000, not raisable here) is per process.
ulimit -Hn 1048576 2>/dev/null || true
left=$NODES k=0
while [ "$left" -gt 0 ]; do
  n=$(( left > PER_PROCESS ? PER_PROCESS : left ))
  k=$((k + 1))
  "$BIN/bench/server/hollow_agents" --server "unix:$SOCK" --nodes "$n" --prefix "hollow-$k-" --work-dir "$STATE/nodes" \
    --cpus "$CPUS" --task-seconds "$TASK_S" --log-level "${HOLLOW_LOG_LEVEL:-error}" >"$STATE/hollow-$k.log" 2>&1 &
  pids+=("$!")
  left=$((left - n))
  if [ "$RAMP" = 1 ]; then  # nodes join one process at a time: wait for these, then schedd's CPU
    for _ in $(seq 1 1200); do grep -q "registered in" "$STATE/hollow-$k.log" && break; sleep 0.25; done
    c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks)
    echo "ramp: $((NODES - left)) nodes, $(grep -o 'registered in.*' "$STATE/hollow-$k.log" || echo 'not all registered'), schedd cpu" \
      "$(python3 -c "print(round(($c1 - $c0) / $(getconf CLK_TCK) / 10 * 100, 1))")%, down $(grep -c 'DOWN:' "$STATE/schedd.log" || true)"
  fi
done
registered=0
for _ in $(seq 1 1200); do
  registered=$("$BIN/cli/mladmin" nodes --json 2>/dev/null | python3 -c 'import json,sys; print(sum(1 for n in json.load(sys.stdin) if n.get("state") != "DOWN"))' 2>/dev/null || echo 0)
  [ "$registered" -ge "$NODES" ] && break
  sleep 0.25
done
register_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")

# schedd's CPU over 10 s while every node heartbeats and nothing else happens.
c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks)
idle_cpu=$(python3 -c "print(round(($c1 - $c0) / $(getconf CLK_TCK) / 10 * 100, 1))")

OUT="$STATE/out"
mkdir -p "$OUT"
submit_t0=$(date +%s.%N)
left=$JOBS
while [ "$left" -gt 0 ]; do
  n=$(( left > 10000 ? 10000 : left ))
  "$BIN/cli/mlsub" --parsable --array "0-$((n - 1))" -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep "$TASK_S" >/dev/null
  left=$((left - n))
done
# Until every job has started (or 30 min pass).
started=0
for _ in $(seq 1 7200); do
  started=$("$BIN/cli/mlq" -a --max-jobs 1000000 -o '%T' -h 2>/dev/null | grep -cvE '^PENDING$' || true)
  [ "$started" -ge "$JOBS" ] && break
  sleep 0.25
done
wall_s=$(python3 -c "print(round($(date +%s.%N) - $submit_t0, 2))")
rss_mb=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$SCHEDD/status")
threads=$(awk '/Threads/ {print $2}' "/proc/$SCHEDD/status")
# Until every job has ended, for the checks.
for _ in $(seq 1 7200); do
  live=$("$BIN/cli/mlq" -h -o '%T' 2>/dev/null | grep -cE '^(PENDING|RUNNING|COMPLETING)$' || true)
  [ "$live" -eq 0 ] && break
  sleep 0.5
done
"$BIN/cli/mlq" -a --max-jobs 1000000 --json >"$STATE/jobs.json"
"$BIN/cli/mladmin" nodes --json >"$STATE/nodes.json"
python3 - "$STATE/jobs.json" "$STATE/nodes.json" "$NODES" "$JOBS" "$registered" "$register_s" "$wall_s" \
  "$rss_mb" "$threads" "$idle_cpu" "$CHECK" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1])); nodes = json.load(open(sys.argv[2]))
n_nodes, n_jobs, registered, register_s, wall_s, rss, threads, idle, check = sys.argv[3:12]
n_jobs = int(n_jobs)
states = {}
for j in jobs: states[j.get("state")] = states.get(j.get("state"), 0) + 1
placed = sum(1 for j in jobs if j.get("start_time", 0) > 0 or j.get("state") == "COMPLETED")
waits = sorted(max(0, j.get("start_time", 0) - j.get("submit_time", 0)) * 1000 for j in jobs if j.get("start_time", 0) > 0)
pct = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))] if waits else -1
down = sum(1 for n in nodes if n.get("state") == "DOWN")
wall = float(wall_s)
print(f"nodes={n_nodes} registered={registered} register_s={register_s} jobs={n_jobs} placed={placed} "
      f"wall_s={wall_s} place_rate={placed / wall if wall > 0 else 0:.0f}/s p50_start_ms={pct(0.5)} "
      f"p99_start_ms={pct(0.99)} rss_mb={rss} threads={threads} idle_cpu_pct={idle} down={down}")
if check == "1":
    attempts = [j for j in jobs if j.get("attempt", 0) != 1]
    problems = []
    if int(registered) < int(n_nodes): problems.append(f"{registered} of {n_nodes} nodes registered")
    if len(jobs) != n_jobs: problems.append(f"{len(jobs)} jobs listed, {n_jobs} submitted")
    if states.get("COMPLETED", 0) != n_jobs: problems.append(f"states {states}")
    if attempts: problems.append(f"{len(attempts)} jobs did not complete on their first attempt")
    if down: problems.append(f"{down} nodes DOWN")
    if problems:
        print("CHECK FAILED: " + "; ".join(problems)); sys.exit(1)
    print("check: every node registered, every job ran once and completed, no node went DOWN")
PY
[ "$PENDING" -gt 0 ] || exit 0

# The backlog: P held jobs, then the figures with it in place.
now() { date +%s.%N; }
ms_since() { python3 -c "print(int(($(now) - $1) * 1000))"; }
best_ms() {  # the best of 3 runs of a command, in ms
  local best=999999999 t m
  for _ in 1 2 3; do t=$(now); "$@" >/dev/null 2>&1; m=$(ms_since "$t"); [ "$m" -lt "$best" ] && best=$m; done
  echo "$best"
}
t=$(now) left=$PENDING
while [ "$left" -gt 0 ]; do
  n=$(( left > 10000 ? 10000 : left ))
  "$BIN/cli/mlsub" --parsable --hold --array "0-$((n - 1))" -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep 1 >/dev/null
  left=$((left - n))
done
submit_s=$(python3 -c "print(round($(now) - $t, 2))")
sleep 5
c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks)
backlog_cpu=$(python3 -c "print(round(($c1 - $c0) / $(getconf CLK_TCK) / 10 * 100, 1))")
backlog_rss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$SCHEDD/status")
one=$("$BIN/cli/mlq" -h -o '%i' --max-jobs 1)
mlq_job=$(best_ms "$BIN/cli/mlq" -j "$one")
mlq_page=$(best_ms "$BIN/cli/mlq" --max-jobs 100)
mlq_all=$(best_ms "$BIN/cli/mlq" --max-jobs 1000000)
nodes_ms=$(best_ms "$BIN/cli/mladmin" nodes)
gangs=()
for _ in $(seq 1 10); do
  t=$(now)
  id=$("$BIN/cli/mlsub" --parsable -n 64 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep 1)
  until [ "$("$BIN/cli/mlq" -h -o '%T' -j "$id")" = RUNNING ]; do sleep 0.02; done
  gangs+=("$(ms_since "$t")")
done
gang_p50=$(printf '%s\n' "${gangs[@]}" | sort -n | sed -n 5p)
gang_max=$(printf '%s\n' "${gangs[@]}" | sort -n | tail -1)
# Restart: stop schedd, start it on the same state, submit a job as soon as it answers.
t=$(now)
kill -TERM "$SCHEDD"; wait "$SCHEDD" 2>/dev/null || true
start_schedd
until id=$("$BIN/cli/mlsub" --parsable -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep 1 2>/dev/null); do sleep 0.05; done
until [ "$("$BIN/cli/mlq" -h -o '%T' -j "$id" 2>/dev/null)" = RUNNING ]; do sleep 0.05; done
restart_s=$(python3 -c "print(round($(now) - $t, 2))")
echo "pending=$PENDING submit_s=$submit_s backlog_rss_mb=$backlog_rss backlog_cpu_pct=$backlog_cpu mlq_job_ms=$mlq_job" \
  "mlq_page_ms=$mlq_page mlq_all_ms=$mlq_all nodes_ms=$nodes_ms gang64_p50_ms=$gang_p50 gang64_max_ms=$gang_max" \
  "restart_to_start_s=$restart_s"
