#!/usr/bin/env bash
# Benchmark of interactive sessions (not a test; issue 32, point 8), on the local cluster (TLS +
# MUNGE, 4 agents), jobs as nobody:
#  1. keystroke round trip through `mlrun --pty` (a raw remote cat; session_rtt.py), SAMPLES bytes;
#  2. output of one session: `mlrun ... head -c 1 GiB /dev/zero` into wc, MB/s;
#  3. the submit latency other clients see (SUBMITS sequential `mlsub -H --wrap true`, p50/p99)
#     idle, then while 4 sessions stream at full speed;
#  4. `mlrun -n 1 true` end to end (a new allocation: submit, start, step, release) and
#     `mlrun --jobid N --rank 0 --overlap true` (a step in a running job), RUNS each, p50;
#     `srun -n1 true` when a Slurm cluster answers here (it is not installed on CI machines).
# Usage: bench/server/session_bench.sh [SAMPLES=300] [SUBMITS=60] [RUNS=20]  (MLSCHED_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SAMPLES=${1:-300} SUBMITS=${2:-60} RUNS=${3:-20}
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
export MLSCHED_BUILD_DIR="$BIN"
STATE=$(mktemp -d /tmp/mlsched-session-bench.XXXXXX)
cleanup() {
  jobs -p | xargs -r kill 2>/dev/null || true
  MLSCHED_STATE=$STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  rm -rf "$STATE"
}
trap cleanup EXIT
MLSCHED_STATE=$STATE bash scripts/local-cluster.sh up >/dev/null
# shellcheck disable=SC1091
source "$STATE/env.sh"
chmod a+rx "$STATE"
mkdir -p "$STATE/out" && chmod 1777 "$STATE/out"
cd "$STATE/out"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
job=$(as_nobody "$BIN/cli/mlsub" --parsable -n 1 -c 1 -t 30:00 --wrap 'sleep 3000')
for _ in $(seq 1 100); do [ "$("$BIN/cli/mlq" -j "$job" -h -o %T)" = RUNNING ] && break; sleep 0.1; done
echo "machine: $(nproc) cores; cluster: 4 agents on this machine; job $job holds rank 0 on od-1"

# 1. Keystrokes.
as_nobody /usr/bin/python3 "$ROOT/bench/server/session_rtt.py" "$SAMPLES" "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap --pty \
  sh -c 'stty raw -echo; echo READY; exec cat'

# 2. Throughput of one session.
t0=$(date +%s.%N)
bytes=$(as_nobody "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap head -c 1073741824 /dev/zero | wc -c)
t1=$(date +%s.%N)
awk -v b="$bytes" -v a="$t0" -v c="$t1" 'BEGIN { printf "one session'"'"'s output: %d MB in %.2f s = %.0f MB/s\n", b / 1e6, c - a, b / 1e6 / (c - a) }'

# 3. Other clients' submit latency, idle and under 4 streaming sessions.
submit_latency() {  # LABEL: SUBMITS held submissions, each timed; prints p50/p99 in ms
  local f="$STATE/lat-$1"
  : > "$f"
  for _ in $(seq 1 "$SUBMITS"); do
    local s e
    s=$(date +%s%N)
    "$BIN/cli/mlsub" --parsable -H --wrap true >/dev/null
    e=$(date +%s%N)
    echo $(( (e - s) / 1000 )) >> "$f"
  done
  sort -n "$f" | awk -v l="$1" '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; printf "%s: submit p50 %.1f ms, p99 %.1f ms (%d submissions)\n", l, v[int(NR * 0.5) + 1] / 1000, v[i] / 1000, NR }'
}
# (a) as is: the 4 clients, the agent, the remote commands and schedd share this machine's cores;
# (b) the sessions' far ends (clients, agents, remote commands) at nice 19, as if on other
#     machines, so what is left is schedd's own share: its relay threads run at nice +10.
stream4() {  # NICE
  for _ in 1 2 3 4; do
    (while :; do nice -n "$1" setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" --jobid "$job" --rank 0 \
       --overlap head -c 1073741824 /dev/zero >/dev/null 2>&1 || break; done) &
  done
  sleep 1
}
stop_streams() {
  jobs -p | xargs -r kill 2>/dev/null || true
  pkill -u 65534 -f 'head -c 1073741824' 2>/dev/null || true
  sleep 1
}
ratio() { awk 'FNR == 1 { split($0, a, "p99 "); split(a[2], b, " "); v[++n] = b[1] } END { printf "%s: p99 %.2fx idle\n", l, v[2] / v[1] }' l="$1" "$2" "$3"; }
submit_latency idle | tee "$STATE/idle.txt"
stream4 0
submit_latency "(a) 4 sessions streaming, all on this machine" | tee "$STATE/busy.txt"
stop_streams
ratio "(a)" "$STATE/idle.txt" "$STATE/busy.txt"
agents=$(pgrep -f "$BIN/agentd/agentd" | tr '\n' ' ')
renice -n 19 -p $agents >/dev/null
stream4 19
submit_latency "(b) 4 sessions streaming, their far ends at nice 19" | tee "$STATE/busy-b.txt"
stop_streams
renice -n 0 -p $agents >/dev/null
ratio "(b)" "$STATE/idle.txt" "$STATE/busy-b.txt"
# (c) the machine's own baseline: 4 CPU-bound pipelines that never touch mlsched.
for _ in 1 2 3 4; do (head -c 100000000000 /dev/zero | gzip -1 > /dev/null) & done
sleep 1
submit_latency "(c) 4 local gzip pipelines, no session" | tee "$STATE/busy-c.txt"
stop_streams
pkill -f 'head -c 100000000000' 2>/dev/null || true
ratio "(c)" "$STATE/idle.txt" "$STATE/busy-c.txt"

# 4. mlrun end to end.
time_runs() {  # LABEL COMMAND...: RUNS runs, p50 in ms
  local label=$1 f="$STATE/runs"
  shift
  : > "$f"
  for _ in $(seq 1 "$RUNS"); do
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s%N)
    echo $(( (e - s) / 1000000 )) >> "$f"
  done
  sort -n "$f" | awk -v l="$label" '{ v[NR] = $1 } END { printf "%s: p50 %d ms, max %d ms (%d runs)\n", l, v[int(NR / 2) + 1], v[NR], NR }'
}
time_runs "mlrun -n 1 true (new allocation, step, release)" as_nobody "$BIN/cli/mlrun" -n 1 -Q true
time_runs "mlrun --jobid $job --rank 0 --overlap true (a step in a running job)" as_nobody "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap true
if command -v srun >/dev/null && srun -n1 true >/dev/null 2>&1; then
  time_runs "srun -n1 true (Slurm)" srun -n1 true
else
  echo "srun -n1 true: no Slurm cluster answers here (slurmd is not installed), not compared"
fi
