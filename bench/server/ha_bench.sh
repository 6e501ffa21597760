#!/usr/bin/env bash
# Benchmark of HA mode (not a test; issue 14, point 5). On loopback, in one run:
#   1. takeover after SIGKILL of the leader: seconds from the kill until a new leader answers
#      (p50, p99 and max over TRIALS kills; the killed replica comes back as a follower);
#   2. graceful handover: the same after SIGTERM (the leader resigns: its lease is revoked);
#   3. durable submissions/s through the gRPC API with 8 clients (TLS + MUNGE), HA (3 etcd
#      members, fenced transactions) beside the single SQLite schedd on the same machine;
#   4. restart to first answer with JOBS held jobs in the store, in both modes (SQLite: restart of
#      schedd; HA: SIGKILL of the leader, so it includes the lease TTL; the log's "state loaded in"
#      is the load alone).
# Usage: bench/server/ha_bench.sh [TRIALS=20] [JOBS=100000]   (MLSCHED_BUILD_DIR, default ./build;
#        HA_BENCH_RATES_ONLY=1 stops after 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
TRIALS=${1:-20} JOBS=${2:-100000}
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
export MLSCHED_BUILD_DIR="$BIN"
BASE=${MLSCHED_HA_BASE_PORT:-32379}
export MLSCHED_HA_BASE_PORT=$BASE
HA_STATE=$(mktemp -d /tmp/mlsched-ha-bench.XXXXXX) ONE_STATE=$(mktemp -d /tmp/mlsched-one-bench.XXXXXX)
cleanup() {
  MLSCHED_STATE=$HA_STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  MLSCHED_STATE=$ONE_STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  [ -n "${KEEP_STATE:-}" ] || rm -rf "$HA_STATE" "$ONE_STATE"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.3f\n", a - b }'; }
leader() { "$BIN/cli/mladmin" ha status --json 2>/dev/null | grep -o '"leader": *"[^"]*"' | grep -o '[0-9.]\+:[0-9]\+'; }
child_pid() { cat "$HA_STATE/pids/schedd-$(( ${1##*:} - BASE - 19 )).child"; }
epoch() { "$BIN/cli/mladmin" ha status --json 2>/dev/null | grep -o '"epoch": *[0-9]*' | grep -o '[0-9]*$'; }
wait_new_leader() {  # OLD_EPOCH: until a leader of a newer epoch (any replica, the restarted one too) answers
  local l e
  for _ in $(seq 1 3000); do
    e=$(epoch || true)
    if [ -n "$e" ] && [ "$e" -gt "$1" ]; then
      l=$(leader || true)
      [ -n "$l" ] && "$BIN/cli/mlq" --server "$l" -h -o %i -j 1 >/dev/null 2>&1 && return 0
    fi
    sleep 0.01
  done
  echo "no new leader within 30 s (old epoch $1; state in $HA_STATE)" >&2; exit 1
}
percentiles() {  # prints p50 p99 max of the numbers on stdin
  sort -n | awk '{ v[NR] = $1 } END { p50 = v[int((NR + 1) * 0.5)]; i = int(NR * 0.99 + 0.999); if (i > NR) i = NR;
    printf "p50 %.2f s, p99 %.2f s, max %.2f s (%d trials)\n", p50, v[i], v[NR], NR }'
}
followers_ready() {  # all three replicas up again (members with a fresh key)
  for _ in $(seq 1 200); do
    [ "$("$BIN/cli/mladmin" ha status --json 2>/dev/null | grep -o '"address"' | wc -l)" -ge 3 ] && return 0
    sleep 0.1
  done
}

MLSCHED_STATE=$HA_STATE bash scripts/local-cluster.sh up --ha >/dev/null
# shellcheck disable=SC1091
source "$HA_STATE/env.sh"
HA_SERVERS=$MLSCHED_SERVER
"$BIN/cli/mlsub" -H --wrap true >/dev/null
for kind in KILL TERM; do
  : > "$HA_STATE/$kind.times"
  for _ in $(seq 1 "$TRIALS"); do
    followers_ready
    sleep 2  # the lease has been renewed at some random point of its period
    l=$(leader) e=$(epoch)
    t0=$(now)
    kill -"$kind" "$(child_pid "$l")"
    wait_new_leader "$e"
    elapsed "$t0" >> "$HA_STATE/$kind.times"
  done
done
echo "1. takeover after SIGKILL of the leader (lease TTL 5 s): $(percentiles < "$HA_STATE/KILL.times")"
echo "2. graceful handover (SIGTERM):                         $(percentiles < "$HA_STATE/TERM.times")"

MLSCHED_STATE=$ONE_STATE MLSCHED_SERVER= bash scripts/local-cluster.sh up >/dev/null
ONE_SERVER=$(grep -o 'MLSCHED_SERVER=.*' "$ONE_STATE/env.sh" | cut -d= -f2)
ONE_MUNGE=$(grep -o 'MLSCHED_MUNGE_SOCKET=.*' "$ONE_STATE/env.sh" | cut -d= -f2)
ONE_CA=$(grep -o 'MLSCHED_TLS_CA=.*' "$ONE_STATE/env.sh" | cut -d= -f2)
rate() {  # SERVER CA MUNGE JOBS [CLIENTS=8]
  MLSCHED_TLS_CA=$2 MLSCHED_MUNGE_SOCKET=$3 "$BIN/bench/server/bench_schedd" --rate "$1" "$4" "${5:-8}"
}
l=$(leader)
lsock="unix:$HA_STATE/schedd-$(( ${l##*:} - BASE - 19 )).sock"
echo "3. durable submissions/s, gRPC, 8 clients (TLS + MUNGE as remote users; the Unix socket isolates the store):"
echo "   HA, TLS + MUNGE:             $(rate "$l" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)"
echo "   single SQLite, TLS + MUNGE:  $(rate "$ONE_SERVER" "$ONE_CA" "$ONE_MUNGE" 20000)"
echo "   HA, Unix socket:             $(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)"
echo "   single SQLite, Unix socket:  $(rate "unix:$ONE_STATE/schedd.sock" "$ONE_CA" "$ONE_MUNGE" 20000)"
# With 8 clients each waits for its group commit: latency-bound. 64 show what the store sustains.
echo "   HA, Unix socket, 64 clients: $(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000 64)"
[ -n "${HA_BENCH_RATES_ONLY:-}" ] && exit 0
# Fill both stores to JOBS held jobs (through the Unix sockets), then restart.
rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" $((JOBS - 60001)) >/dev/null
rate "unix:$ONE_STATE/schedd.sock" "$ONE_CA" "$ONE_MUNGE" $((JOBS - 40000)) >/dev/null
pid=$(cat "$ONE_STATE/pids/schedd")
mapfile -d '' cmd < "/proc/$pid/cmdline"
port=${ONE_SERVER##*:}
for i in "${!cmd[@]}"; do [ "${cmd[$i]}" = 127.0.0.1:0 ] && cmd[$i]=127.0.0.1:$port; done
kill -9 "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
t0=$(now)
setsid "${cmd[@]}" >>"$ONE_STATE/logs/schedd.log" 2>&1 < /dev/null &
echo $! > "$ONE_STATE/pids/schedd"
until MLSCHED_TLS_CA=$ONE_CA MLSCHED_MUNGE_SOCKET=$ONE_MUNGE "$BIN/cli/mlq" --server "$ONE_SERVER" -h -o %i -j 1 >/dev/null 2>&1; do sleep 0.05; done
echo "4. restart to first answer with $JOBS jobs in the store:"
echo "   single SQLite schedd: $(elapsed "$t0") s"
followers_ready
sleep 2
l=$(leader) e=$(epoch)
t0=$(now)
kill -9 "$(child_pid "$l")"
wait_new_leader "$e"
took=$(elapsed "$t0")
loaded=$(grep -h 'state loaded in' "$HA_STATE"/logs/schedd-*.log | sort | tail -1 | grep -o 'state loaded in [0-9]* ms, [0-9]* job')
echo "   HA takeover (SIGKILL): $took s ($loaded(s) in memory)"
