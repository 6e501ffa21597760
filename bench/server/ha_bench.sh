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
# etcd as local-cluster.sh runs it: client and peer mutual TLS with RBAC (--etcd-tls on), or
# plaintext with schedd --ha-insecure (off). `both` (the default) runs 1, 2 and 4 on the TLS cluster
# and the HA rows of 3 on both, on a second HA cluster (plaintext, ports from base + 50) that is up
# beside the first during all of 3, so each row compares the two at the same number of stored jobs;
# it prints each pair's ratio (TLS / plaintext).
# Usage: bench/server/ha_bench.sh [TRIALS=20] [JOBS=100000] [--etcd-tls on|off|both]
#        (MLSCHED_BUILD_DIR, default ./build; MLSCHED_HA_BASE_PORT, default 32379;
#        HA_BENCH_RATES_ONLY=1 stops after 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
ETCD_TLS=both pos=()
while [ $# -gt 0 ]; do
  case "$1" in
    --etcd-tls) [ $# -ge 2 ] || { echo "--etcd-tls needs on, off or both" >&2; exit 2; }; ETCD_TLS=$2; shift 2 ;;
    --etcd-tls=*) ETCD_TLS=${1#*=}; shift ;;
    *) pos+=("$1"); shift ;;
  esac
done
[[ $ETCD_TLS =~ ^(on|off|both)$ ]] || { echo "--etcd-tls is on, off or both, not '$ETCD_TLS'" >&2; exit 2; }
TRIALS=${pos[0]:-20} JOBS=${pos[1]:-100000}
[[ $TRIALS =~ ^[1-9][0-9]{0,3}$ && $JOBS =~ ^[0-9]{1,7}$ ]] && [ "$JOBS" -ge 60001 ] ||
  { echo "usage: $0 [TRIALS 1-9999] [JOBS >= 60001] [--etcd-tls on|off|both]" >&2; exit 2; }
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
export MLSCHED_BUILD_DIR="$BIN"
BASE=${MLSCHED_HA_BASE_PORT:-32379}
export MLSCHED_HA_BASE_PORT=$BASE
HA_STATE=$(mktemp -d /tmp/mlsched-ha-bench.XXXXXX) ONE_STATE=$(mktemp -d /tmp/mlsched-one-bench.XXXXXX)
PLAIN_STATE=$(mktemp -d /tmp/mlsched-ha-plain-bench.XXXXXX)
cleanup() {
  MLSCHED_STATE=$HA_STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  MLSCHED_STATE=$ONE_STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  MLSCHED_STATE=$PLAIN_STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  [ -n "${KEEP_STATE:-}" ] || rm -rf "$HA_STATE" "$ONE_STATE" "$PLAIN_STATE"
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

# The first cluster: etcd on TLS unless --etcd-tls off.
MAIN_TLS=1 MAIN_LABEL="etcd mutual TLS + RBAC"
[ "$ETCD_TLS" = off ] && MAIN_TLS=0 MAIN_LABEL="etcd plaintext"
MLSCHED_STATE=$HA_STATE MLSCHED_ETCD_TLS=$MAIN_TLS bash scripts/local-cluster.sh up --ha >/dev/null
echo "HA cluster: $MAIN_LABEL"
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
rate() {  # SERVER CA MUNGE JOBS [CLIENTS=8]: bench_schedd's line; one with errors is printed, and the run goes on
  MLSCHED_TLS_CA=$2 MLSCHED_MUNGE_SOCKET=$3 "$BIN/bench/server/bench_schedd" --rate "$1" "$4" "${5:-8}" || true
}
l=$(leader)
lsock="unix:$HA_STATE/schedd-$(( ${l##*:} - BASE - 19 )).sock"
if [ "$ETCD_TLS" = both ]; then
  # The plaintext cluster: up during all of 3, idle while the TLS cluster is measured and the reverse.
  PBASE=$((BASE + 50))
  MLSCHED_STATE=$PLAIN_STATE MLSCHED_HA_BASE_PORT=$PBASE MLSCHED_ETCD_TLS=0 bash scripts/local-cluster.sh up --ha >/dev/null
  P_SERVERS=$(grep -o 'MLSCHED_SERVER=.*' "$PLAIN_STATE/env.sh" | cut -d= -f2)
  pl=$(MLSCHED_SERVER=$P_SERVERS MLSCHED_TLS_CA=$PLAIN_STATE/tls/ca.pem MLSCHED_MUNGE_SOCKET=$PLAIN_STATE/munge/munge.sock leader)
  psock="unix:$PLAIN_STATE/schedd-$(( ${pl##*:} - PBASE - 19 )).sock"
fi
# bench_schedd prints "rate SERVER: X durable submissions/s (J jobs, C clients, E errors)".
num() { grep -o '[0-9.]* durable' <<<"$1" | cut -d' ' -f1; }
errors() { grep -o '[0-9]* errors' <<<"$1" | cut -d' ' -f1; }
pair() {  # LABEL TLS_RESULT PLAIN_RESULT: both and their ratio (none when a run had errors)
  echo "   $1 TLS: $2"
  echo "   $1 plaintext: $3"
  if [ "$(errors "$2")" = 0 ] && [ "$(errors "$3")" = 0 ]; then
    awk -v a="$(num "$2")" -v b="$(num "$3")" -v l="$1" 'BEGIN { if (a > 0 && b > 0) printf "   %s TLS / plaintext: %.3f\n", l, a / b }'
  else
    echo "   $1 TLS / plaintext: not computed (a run had errors)"
  fi
}
echo "3. durable submissions/s, gRPC, 8 clients (TLS + MUNGE as remote users; the Unix socket isolates the store; HA: $MAIN_LABEL):"
if [ "$ETCD_TLS" = both ]; then
  t=$(rate "$l" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)
  p=$(rate "$pl" "$PLAIN_STATE/tls/ca.pem" "$PLAIN_STATE/munge/munge.sock" 20000)
  pair "HA, TLS + MUNGE, etcd" "$t" "$p"
else
  echo "   HA, TLS + MUNGE:             $(rate "$l" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)"
fi
echo "   single SQLite, TLS + MUNGE:  $(rate "$ONE_SERVER" "$ONE_CA" "$ONE_MUNGE" 20000)"
if [ "$ETCD_TLS" = both ]; then
  t=$(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)
  p=$(rate "$psock" "$PLAIN_STATE/tls/ca.pem" "$PLAIN_STATE/munge/munge.sock" 20000)
  pair "HA, Unix socket, etcd" "$t" "$p"
else
  echo "   HA, Unix socket:             $(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000)"
fi
echo "   single SQLite, Unix socket:  $(rate "unix:$ONE_STATE/schedd.sock" "$ONE_CA" "$ONE_MUNGE" 20000)"
# With 8 clients each waits for its group commit: latency-bound. 64 show what the store sustains.
if [ "$ETCD_TLS" = both ]; then
  t=$(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000 64)
  p=$(rate "$psock" "$PLAIN_STATE/tls/ca.pem" "$PLAIN_STATE/munge/munge.sock" 20000 64)
  pair "HA, Unix socket, 64 clients, etcd" "$t" "$p"
  MLSCHED_STATE=$PLAIN_STATE bash scripts/local-cluster.sh down >/dev/null
else
  echo "   HA, Unix socket, 64 clients: $(rate "$lsock" "$MLSCHED_TLS_CA" "$MLSCHED_MUNGE_SOCKET" 20000 64)"
fi
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
