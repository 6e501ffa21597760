#!/usr/bin/env bash
# End to end, real daemons: elastic capacity through the provisioning programs (issue 16 point 4).
# The local cluster's agents have 2 CPUs; the policy's [provisioning.reserved] pool (no node at
# first, max_nodes 2) makes 4-CPU nodes with scripts/local-provision-resume, which starts a local
# agentd per name, and releases them with scripts/local-provision-suspend. Two 4-CPU jobs are
# submitted: the pool asks for reserved-p[1-2] ("requested 2 nodes from pool reserved" in
# `mlq --explain`); reserved-p2 never starts (listed in provision-never-start), so after
# resume_timeout it is marked failed and a third node is asked for; both jobs run on created nodes
# and complete; the idle nodes are released after idle_time (their agents stopped). The metrics
# count requested 3, registered 2, failed 1, released 2.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
IDLE=6 TIMEOUT=8
cat > "$MLSCHED_STATE/policy.toml" <<EOF
[backfill]
mode = "easy"
[pricing.reserved]
cpu_hour = 0.25
[provisioning.reserved]
resume_program = "$ROOT/scripts/local-provision-resume"
suspend_program = "$ROOT/scripts/local-provision-suspend"
max_nodes = 2
idle_time = $IDLE
resume_timeout = $TIMEOUT
max_cost_per_hour = 2.0
cpus = 4
memory = "2G"
region = "local"
zone = "local-a"
domain = "rack-c"
root_jobs = $( [ "$(id -u)" = 0 ] && echo true || echo false )
EOF
echo reserved-p2 > "$MLSCHED_STATE/provision-never-start"
export MLSCHED_POLICY="$MLSCHED_STATE/policy.toml" MLSCHED_OBJECT_STORE=dir
E2E_NAME=provision-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
OUT="$MLSCHED_STATE/out"
metric() {  # metric NAME{LABELS}: its value from schedd's /metrics (0 when absent)
  curl -fsS "$MLSCHED_METRICS_URL" | awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }'
}
nodes_of() { "$BIN/cli/mlq" -j "$1" -h -o %N; }

# A runs 12 s (past resume_timeout, so B cannot take its node), B 1 s; 4 CPUs fit no static node.
a=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J prov-a -n 1 -c 4 -t 5:00 --wrap 'sleep 12')
b=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J prov-b -n 1 -c 4 -t 5:00 --wrap 'sleep 1')
t_submit=$(date +%s.%N)
say "submitted $a and $b (4 CPUs each; the static agents have 2)"
# One request for both (one cycle saw both jobs) or one each (a cycle ran between the submissions).
asked='requested (2 nodes from pool reserved \(reserved-p\[1-2\]\)|1 node from pool reserved \(reserved-p2\))'
for _ in $(seq 1 25); do
  "$BIN/cli/mlq" --explain "$b" | qgrep -E "$asked" && break
  sleep 0.2
done
line=$("$BIN/cli/mlq" --explain "$b" | grep -E "$asked") || fail "mlq --explain $b does not say that nodes were requested for it"
say "mlq --explain $b: $(echo "$line" | sed 's/^ *//')"
wait_for "$a" RUNNING 20
t_run=$(date +%s.%N)
[ "$(nodes_of "$a")" = reserved-p1 ] || fail "job $a runs on $(nodes_of "$a"), not the created reserved-p1"
say "job $a running on reserved-p1 $(awk -v a="$t_submit" -v b="$t_run" 'BEGIN { printf "%.1f", b - a }') s after submission"
[ -f "$MLSCHED_STATE/pids/agent-reserved-p1" ] || fail "no agent pid file for reserved-p1"
[ ! -f "$MLSCHED_STATE/pids/agent-reserved-p2" ] || fail "reserved-p2 was started although it never should"

# reserved-p2 never registers: failed after resume_timeout, its demand asked for again as reserved-p3.
wait_for "$b" RUNNING $(( TIMEOUT + 15 ))
t_b=$(date +%s.%N)
[ "$(nodes_of "$b")" = reserved-p3 ] || fail "job $b runs on $(nodes_of "$b"), not reserved-p3"
grep -q "reserved-p2 failed: did not register within $TIMEOUT s (resume_timeout)" "$MLSCHED_STATE/logs/schedd.log" ||
  fail "schedd did not mark reserved-p2 failed"
say "reserved-p2 failed after resume_timeout; job $b running on reserved-p3 $(awk -v a="$t_submit" -v b="$t_b" 'BEGIN { printf "%.1f", b - a }') s after submission"
[ "$(metric 'mlsched_provision_cost_per_hour{pool="reserved"}')" = 2 ] || fail "cost rate is not 2 x 4 x 0.25"

wait_for "$b" COMPLETED 15
wait_for "$a" COMPLETED 20
t_done=$(date +%s.%N)
say "both jobs completed; waiting for the idle nodes to be released (idle_time $IDLE s)"
for _ in $(seq 1 $(( (IDLE + 10) * 5 ))); do
  [ ! -f "$MLSCHED_STATE/pids/agent-reserved-p1" ] && [ ! -f "$MLSCHED_STATE/pids/agent-reserved-p3" ] && break
  sleep 0.2
done
[ ! -f "$MLSCHED_STATE/pids/agent-reserved-p1" ] && [ ! -f "$MLSCHED_STATE/pids/agent-reserved-p3" ] ||
  fail "the idle created nodes were not released within idle_time + 10 s"
t_rel=$(date +%s.%N)
say "reserved-p1 and reserved-p3 released $(awk -v a="$t_done" -v b="$t_rel" 'BEGIN { printf "%.1f", b - a }') s after the last job ended"
grep -q "provisioning: suspend .*local-provision-suspend reserved-p\[1,3\]: exit 0" "$MLSCHED_STATE/logs/schedd.log" ||
  grep -q "provisioning: suspend .*local-provision-suspend reserved-p[13]: exit 0" "$MLSCHED_STATE/logs/schedd.log" ||
  fail "the suspend program's run is not in schedd's log"
for kv in requested=3 registered=2 failed=1 released=2; do
  got=$(metric "mlsched_provision_nodes_total{event=\"${kv%=*}\",pool=\"reserved\"}")
  [ "$got" = "${kv#*=}" ] || fail "mlsched_provision_nodes_total{event=${kv%=*}} is $got, not ${kv#*=}"
done
[ "$(metric 'mlsched_provision_cost_per_hour{pool="reserved"}')" = 0 ] || fail "cost rate is not 0 after the release"
say "PASSED in $(( $(date +%s) - T0 )) s"
