#!/usr/bin/env bash
# Scale benchmark (issue 30; a benchmark, not a test): one schedd (SQLite on its Unix socket) and
# NODES hollow nodes (bench/server/hollow_agents: real agent protocol, tasks without processes),
# then JOBS one-task jobs submitted as job arrays of at most 10,000 elements, each running
# TASK_SECONDS (default 1). Prints one line:
#   nodes=N registered=N register_s=S jobs=J placed=P submit_s=U wall_s=W place_rate=R/s p50_start_ms=A
#   p99_start_ms=B rss_mb=M threads=T idle_cpu_pct=C down=D
# registered/register_s: nodes registered and how long that took; placed: jobs that ever started
# (RUNNING or ended COMPLETED), each counted once; submit_s: how long the submissions took (mlsub
# of every array, one after another); wall_s: from the first submission until every
# job has started; place_rate = placed / wall_s; start times are submit -> start of the first
# attempt (schedd keeps seconds: the figures are whole seconds, in ms); rss_mb and threads of
# schedd once every job has started; idle_cpu_pct: schedd's CPU over 10 s with every node
# heartbeating and no job (before the submissions); down: nodes DOWN at the end (should be 0).
#   bash bench/server/scale_bench.sh BUILD_DIR NODES JOBS [--cpus N] [--task-seconds S]
#                                    [--heartbeat-interval S] [--nodes-per-process N] [--check]
#                                    [--pending P] [--ramp] [--tls] [--ha] [--hollow-nice N]
# --check: exit 1 unless every node registered, every job started exactly once and completed,
# and no node went DOWN (the scale smoke test in CI uses it).
# --ramp: the hollow processes start one at a time, each once the previous one's nodes registered,
# with a line per step: nodes so far, how long the step took, schedd's CPU over 10 s, nodes DOWN
# (register_s then includes those 10 s pauses).
# --pending P: then a backlog of P held one-task jobs (mlsub --hold, as arrays) and a second line:
#   pending=P submit_s=S backlog_rss_mb=M backlog_cpu_pct=C mlq_job_ms=A mlq_page_ms=B mlq_all_ms=C
#   nodes_ms=D gang64_p50_ms=E gang64_max_ms=F restart_to_start_s=R (--ha: takeover_to_start_s=R)
# backlog_cpu_pct: schedd's CPU over 10 s with the backlog and every node heartbeating; mlq_job_ms:
# `mlq -j ID`, mlq_page_ms: `mlq --max-jobs 100`, mlq_all_ms: the whole listing (P jobs), nodes_ms:
# `mladmin nodes` (each the best of 3, wall time of the CLI); gang64: 10 gangs of 64 one-CPU tasks
# submitted one after another, submit -> RUNNING as seen by polling mlq every 20 ms; restart: schedd
# is stopped (SIGTERM) and started on the same state, and the time runs from the stop until a job
# submitted as soon as schedd answers is RUNNING.
# --hollow-nice N: the hollow processes run at nice N (default 0), so that on a shared machine they
# take the cores only when schedd does not (kubemark puts hollow nodes on machines of their own).
# --tls: as production runs: the nodes on TCP with mutual TLS (a node certificate each, made before
# the clock starts; scripts/mlsched-certs.sh), the CLI on TCP with TLS and MUNGE (a private munged).
# --ha (implies --tls): the state on a 3-member etcd (TLS, its own CA) and two schedd replicas
# (--ha): the leader takes the load, the standby waits; the line with --pending then measures a
# takeover instead of a restart (takeover_to_start_s: the leader is killed with SIGKILL, the time
# runs until a job submitted to the replica list is RUNNING under the new leader; includes the
# lease's expiry, --ha-lease-ttl 5 s). Each replica runs under a restart loop (systemd's
# Restart=always): one that loses the leadership exits 3 and comes back. Every process shares
# this machine's cores.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,42p' "$0" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "$1" && pwd) NODES=$2 JOBS=$3
shift 3
CPUS=32 TASK_S=1 HB=5 CHECK=0 PER_PROCESS=250 PENDING=0 RAMP=0 TLS=0 HA=0 HOLLOW_NICE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --cpus) CPUS=$2; shift 2 ;;
    --task-seconds) TASK_S=$2; shift 2 ;;
    --heartbeat-interval) HB=$2; shift 2 ;;
    --check) CHECK=1; shift ;;
    --nodes-per-process) PER_PROCESS=$2; shift 2 ;;
    --pending) PENDING=$2; shift 2 ;;
    --ramp) RAMP=1; shift ;;
    --tls) TLS=1; shift ;;
    --ha) HA=1; TLS=1; shift ;;
    --hollow-nice) HOLLOW_NICE=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $PENDING =~ ^[0-9]+$ ]] || { echo "--pending takes a count" >&2; exit 2; }
[[ $HOLLOW_NICE =~ ^[0-9]+$ && $HOLLOW_NICE -le 19 ]] || { echo "--hollow-nice takes 0 to 19" >&2; exit 2; }
[[ $NODES =~ ^[0-9]+$ && $JOBS =~ ^[0-9]+$ && $PER_PROCESS =~ ^[0-9]+$ && $NODES -ge 1 && $JOBS -ge 1 && $PER_PROCESS -ge 1 ]] || { echo "NODES and JOBS are positive integers" >&2; exit 2; }
STATE=$(mktemp -d /tmp/mlsched-scale.XXXXXX)
SOCK="$STATE/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
pids=()
cleanup() {
  touch "$STATE/stopping"
  for f in "$STATE"/schedd-*.pid; do [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ -z "${MUNGED:-}" ] || kill "$MUNGED" 2>/dev/null || true
  [ -n "${KEEP_STATE:-}" ] && echo "state kept in $STATE" >&2 || rm -rf "$STATE"
}
trap cleanup EXIT

# The node names hollow_agents gives: hollow-K-NUM, NUM zero-padded to the width of process K's count.
node_names() {
  local left=$NODES k=0 n i
  while [ "$left" -gt 0 ]; do
    n=$(( left > PER_PROCESS ? PER_PROCESS : left )); k=$((k + 1)); left=$((left - n))
    for i in $(seq 1 "$n"); do printf "hollow-$k-%0${#n}d\n" "$i"; done
  done
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --tls: the cluster CA, schedd's certificate and one certificate per node. The nodes share one key
# and get serials of their own (one openssl run per node instead of mlsched-certs.sh's three: the
# setup of 1,000 nodes takes seconds, not minutes; none of it is timed).
TLS_FLAGS=() AGENT_SERVER="unix:$SOCK" AGENT_TLS=() SCHEDD_ARGS=()
if [ "$TLS" = 1 ]; then
  T="$STATE/tls"
  bash "$REPO/scripts/mlsched-certs.sh" "$T" ca >/dev/null
  bash "$REPO/scripts/mlsched-certs.sh" "$T" schedd localhost >/dev/null
  mkdir -p "$T/nodes"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$T/node.key" \
    -subj "/O=mlsched/CN=node" -out "$T/node.csr" 2>/dev/null
  node_names | awk '{print NR, $1}' | xargs -P "$(nproc)" -n 2 sh -c '
    ext=$(mktemp); printf "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:%s\n" "$2" >"$ext"
    openssl x509 -req -in "$0/node.csr" -subj "/O=mlsched/CN=$2" -CA "$0/ca.pem" -CAkey "$0/ca.key" -set_serial "$((100000 + $1))" \
      -days 30 -sha256 -extfile "$ext" -out "$0/nodes/$2.pem" 2>/dev/null && cp "$0/node.key" "$0/nodes/$2.key"; rm -f "$ext"' "$T"
  mkdir -p "$STATE/munge"
  mungekey --create --keyfile="$STATE/munge/munge.key"
  munged --force --socket="$STATE/munge/munge.sock" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munged.log" --seed-file="$STATE/munge/munged.seed"
  for _ in $(seq 1 50); do [ -s "$STATE/munge/munged.pid" ] && break; sleep 0.1; done
  MUNGED=$(cat "$STATE/munge/munged.pid")
  export MLSCHED_TLS_CA="$T/ca.pem" MLSCHED_MUNGE_SOCKET="$STATE/munge/munge.sock"
  TLS_FLAGS=(--tls-cert "$T/schedd.pem" --tls-key "$T/schedd.key" --tls-ca "$T/ca.pem" --munge-socket "$MLSCHED_MUNGE_SOCKET")
  AGENT_TLS=(--tls-dir "$T")
fi
# --ha: three etcd members on loopback (client and peer mutual TLS, etcd's own CA) and two replicas.
# Jobs go in as arrays of CHUNK elements; in HA mode one array is one etcd transaction of 2 x CHUNK
# + 3 operations (etcd's --max-txn-ops and schedd's --ha-max-txn-ops are raised to fit) and at
# most 1.5 MiB.
CHUNK=10000 TXN_OPS=1100
if [ "$HA" = 1 ]; then
  CHUNK=500  # ~1.1 KB per job: 500 fit etcd's 1.5 MiB request
  E="$T/etcd" cluster="" endpoints=""
  bash "$REPO/scripts/mlsched-certs.sh" "$T" etcd-ca >/dev/null
  for i in 1 2 3; do bash "$REPO/scripts/mlsched-certs.sh" "$T" etcd-member "etcd-$i" 127.0.0.1 >/dev/null; done
  bash "$REPO/scripts/mlsched-certs.sh" "$T" etcd-client mlsched-schedd >/dev/null
  declare -a cport pport
  for i in 1 2 3; do cport[i]=$(free_port); pport[i]=$(free_port); done
  for i in 1 2 3; do cluster="${cluster:+$cluster,}etcd-$i=https://127.0.0.1:${pport[i]}"; endpoints="${endpoints:+$endpoints,}127.0.0.1:${cport[i]}"; done
  for i in 1 2 3; do
    etcd --name "etcd-$i" --data-dir "$STATE/etcd-$i" --listen-client-urls "https://127.0.0.1:${cport[i]}" \
      --advertise-client-urls "https://127.0.0.1:${cport[i]}" --listen-peer-urls "https://127.0.0.1:${pport[i]}" \
      --initial-advertise-peer-urls "https://127.0.0.1:${pport[i]}" --initial-cluster "$cluster" --initial-cluster-state new \
      --client-cert-auth --trusted-ca-file "$E/ca.pem" --cert-file "$E/etcd-$i.pem" --key-file "$E/etcd-$i.key" \
      --peer-client-cert-auth --peer-trusted-ca-file "$E/ca.pem" --peer-cert-file "$E/etcd-$i.pem" \
      --peer-key-file "$E/etcd-$i.key" --peer-cert-allowed-hostname member.etcd.mlsched \
      --auto-compaction-mode periodic --auto-compaction-retention 10m --max-txn-ops "$TXN_OPS" \
      >"$STATE/etcd-$i.log" 2>&1 &
    pids+=("$!")
  done
  SCHEDD_ARGS=(--ha "etcd://$endpoints" --etcd-tls-ca "$E/ca.pem" --etcd-tls-cert "$E/clients/mlsched-schedd.pem"
               --etcd-tls-key "$E/clients/mlsched-schedd.key" --ha-lease-ttl 5 --ha-max-txn-ops "$TXN_OPS")
fi
declare -a tcp_port mport
tcp_port[1]=$(free_port) tcp_port[2]=$(free_port) mport[1]=$(free_port) mport[2]=$(free_port)
# jobs_in REGEX: jobs whose state matches REGEX, from replica 1's metrics (mlsched_jobs, counted at
# the scrape; cheaper for schedd than listing every job); empty if it does not answer.
jobs_in() {
  local m
  m=$(curl -sf --max-time 20 "http://127.0.0.1:${mport[1]}/metrics") || return 0
  awk -v re="^($1)\$" '/^mlsched_jobs[{]/ { if (match($0, /state="[A-Z_]+"/)) { st = substr($0, RSTART + 7, RLENGTH - 8); if (st ~ re) s += $NF } }
    END { printf "%d\n", s }' <<<"$m"
}
# start_schedd [REPLICA]: schedd (replica REPLICA of the HA pair, default 1) in the background: SCHEDD.
start_schedd() {
  local r=${1:-1} listen=(--listen "unix:$SOCK") db="$STATE/db"
  [ "$HA" = 1 ] && listen=(--listen "unix:$STATE/schedd-$r.sock") db="$STATE/db-$r"
  [ "$TLS" = 1 ] && listen+=(--listen-tcp "127.0.0.1:${tcp_port[r]}" "${TLS_FLAGS[@]}")
  local cmd=("$BIN/schedd/server/schedd" "${listen[@]}" --state-dir "$db" --heartbeat-interval "$HB" "${SCHEDD_ARGS[@]}"
             --metrics-port "${mport[r]}" --heartbeat-timeout $((HB * 6)) --max-array-size 10000 --log-level warn)
  if [ "$HA" = 0 ]; then
    "${cmd[@]}" >>"$STATE/schedd-$r.log" 2>&1 &
    SCHEDD=$!
    pids+=("$SCHEDD")
    return
  fi
  # HA: each replica under a restart loop, as systemd's Restart=always runs it (a replica that
  # loses or cannot take the leadership exits 3 and comes back as a follower); SCHEDD is the
  # replica's current process (schedd-R.pid).
  rm -f "$STATE/schedd-$r.pid"
  bash -c 'while :; do "$@" & c=$!; echo $c > "'"$STATE/schedd-$r.pid"'"; wait $c; [ -e "'"$STATE/stopping"'" ] && exit 0; sleep 1; done' \
    loop "${cmd[@]}" >>"$STATE/schedd-$r.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 100); do [ -s "$STATE/schedd-$r.pid" ] && break; sleep 0.05; done
  SCHEDD=$(cat "$STATE/schedd-$r.pid")
}
if [ "$TLS" = 1 ]; then
  export MLSCHED_SERVER="127.0.0.1:${tcp_port[1]}"
  [ "$HA" = 1 ] && export MLSCHED_SERVER="127.0.0.1:${tcp_port[1]},127.0.0.1:${tcp_port[2]}"
  AGENT_SERVER=$MLSCHED_SERVER
fi
start_schedd 1
for _ in $(seq 1 300); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/cli/mlq" >/dev/null || { echo "schedd does not answer; see $STATE/schedd-1.log" >&2; KEEP_STATE=1; exit 1; }
if [ "$HA" = 1 ]; then  # the standby, once replica 1 leads
  LEADER=$SCHEDD
  start_schedd 2
  STANDBY=$SCHEDD SCHEDD=$LEADER
fi

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
  nice -n "$HOLLOW_NICE" "$BIN/bench/server/hollow_agents" --server "$AGENT_SERVER" "${AGENT_TLS[@]}" --nodes "$n" --prefix "hollow-$k-" --work-dir "$STATE/nodes" \
    --cpus "$CPUS" --task-seconds "$TASK_S" --log-level "${HOLLOW_LOG_LEVEL:-error}" >"$STATE/hollow-$k.log" 2>&1 &
  pids+=("$!")
  left=$((left - n))
  if [ "$RAMP" = 1 ]; then  # nodes join one process at a time: wait for these, then schedd's CPU
    for _ in $(seq 1 1200); do grep -q "registered in" "$STATE/hollow-$k.log" && break; sleep 0.25; done
    c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks)
    echo "ramp: $((NODES - left)) nodes, $(grep -o 'registered in.*' "$STATE/hollow-$k.log" || echo 'not all registered'), schedd cpu" \
      "$(python3 -c "print(round(($c1 - $c0) / $(getconf CLK_TCK) / 10 * 100, 1))")%, down $(cat "$STATE"/schedd-*.log | grep -c 'DOWN:' || true)"
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
  n=$(( left > CHUNK ? CHUNK : left ))
  t_one=$(date +%s.%N)
  "$BIN/cli/mlsub" --parsable --array "0-$((n - 1))" -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep "$TASK_S" >/dev/null
  python3 -c "t = $(date +%s.%N) - $t_one; t > 2 and print(f'slow submission: {$n} jobs took {t:.1f} s with {$((JOBS - left))} submitted before')" >&2
  left=$((left - n))
done
jobs_submit_s=$(python3 -c "print(round($(date +%s.%N) - $submit_t0, 2))")
# Until every job has started (or 30 min pass).
for _ in $(seq 1 7200); do
  pending=$(jobs_in PENDING)
  [ "${pending:-1}" -eq 0 ] && break
  sleep 0.25
done
wall_s=$(python3 -c "print(round($(date +%s.%N) - $submit_t0, 2))")
rss_mb=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$SCHEDD/status")
threads=$(awk '/Threads/ {print $2}' "/proc/$SCHEDD/status")
# Until every job has ended, for the checks.
for _ in $(seq 1 7200); do
  live=$(jobs_in 'PENDING|RUNNING|COMPLETING')
  [ "${live:-1}" -eq 0 ] && break
  sleep 0.5
done
"$BIN/cli/mlq" -a --max-jobs 1000000 --json >"$STATE/jobs.json"
"$BIN/cli/mladmin" nodes --json >"$STATE/nodes.json"
python3 - "$STATE/jobs.json" "$STATE/nodes.json" "$NODES" "$JOBS" "$registered" "$register_s" "$wall_s" \
  "$rss_mb" "$threads" "$idle_cpu" "$CHECK" "$jobs_submit_s" <<'PY'
import json, sys
jobs = json.load(open(sys.argv[1])); nodes = json.load(open(sys.argv[2]))
n_nodes, n_jobs, registered, register_s, wall_s, rss, threads, idle, check, submit_s = sys.argv[3:13]
n_jobs = int(n_jobs)
states = {}
for j in jobs: states[j.get("state")] = states.get(j.get("state"), 0) + 1
placed = sum(1 for j in jobs if j.get("start_time", 0) > 0 or j.get("state") == "COMPLETED")
waits = sorted(max(0, j.get("start_time", 0) - j.get("submit_time", 0)) * 1000 for j in jobs if j.get("start_time", 0) > 0)
pct = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))] if waits else -1
down = sum(1 for n in nodes if n.get("state") == "DOWN")
wall = float(wall_s)
print(f"nodes={n_nodes} registered={registered} register_s={register_s} jobs={n_jobs} placed={placed} "
      f"submit_s={submit_s} wall_s={wall_s} place_rate={placed / wall if wall > 0 else 0:.0f}/s p50_start_ms={pct(0.5)} "
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
  n=$(( left > CHUNK ? CHUNK : left ))
  "$BIN/cli/mlsub" --parsable --hold --array "0-$((n - 1))" -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep 1 >/dev/null
  left=$((left - n))
done
submit_s=$(python3 -c "print(round($(now) - $t, 2))")
sleep 5
c0=$(cpu_ticks); sleep 10; c1=$(cpu_ticks)
backlog_cpu=$(python3 -c "print(round(($c1 - $c0) / $(getconf CLK_TCK) / 10 * 100, 1))")
backlog_rss=$(awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$SCHEDD/status")
one=$("$BIN/cli/mlq" -h -o '%i' --max-jobs 1 2>/dev/null)
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
# Restart: stop schedd, start it on the same state, submit a job as soon as it answers. HA: kill
# the leader (SIGKILL, a crash) and submit to the replica list until the standby leads.
t=$(now) what=restart
if [ "$HA" = 1 ]; then
  what=takeover
  kill -KILL "$SCHEDD"
  SCHEDD=$(cat "$STATE/schedd-2.pid")
else
  kill -TERM "$SCHEDD"; wait "$SCHEDD" 2>/dev/null || true
  start_schedd
fi
stopped_s=$(python3 -c "print(round($(now) - $t, 2))")
until id=$("$BIN/cli/mlsub" --parsable -n 1 -c 1 -t 10:00 -D "$OUT" -o /dev/null -- sleep 1 2>/dev/null); do sleep 0.05; done
answer_s=$(python3 -c "print(round($(now) - $t, 2))")
until [ "$("$BIN/cli/mlq" -h -o '%T' -j "$id" 2>/dev/null)" = RUNNING ]; do sleep 0.05; done
restart_s=$(python3 -c "print(round($(now) - $t, 2))")
echo "pending=$PENDING submit_s=$submit_s backlog_rss_mb=$backlog_rss backlog_cpu_pct=$backlog_cpu mlq_job_ms=$mlq_job" \
  "mlq_page_ms=$mlq_page mlq_all_ms=$mlq_all nodes_ms=$nodes_ms gang64_p50_ms=$gang_p50 gang64_max_ms=$gang_max" \
  "${what}_to_start_s=$restart_s (stopped ${stopped_s} s, answering ${answer_s} s)"
