#!/usr/bin/env bash
# End to end (issue 33, node health): four agents with two "GPUs" each (NVML from
# tests/agentd/fake_nvml.cc), their own kernel log file (--health-kmsg) and an NHC-style health
# program each, checked every second; the policy's [health] is drain-and-requeue with auto_resume:
#  - an Xid 79 on the GPU of a node under a running elastic mltrain gang (4 ranks, one per node):
#    the node is drained with the reason "health: xid: GPU 1 XID 79 (fallen off the bus)", the
#    gang checkpoint-requeued, restarted on 3 ranks without it, and it completes with a test
#    accuracy of at least 88 %; the Xid is sticky (an operator's resume is undone at the next
#    round);
#  - a health program that fails with NHC's message drains its node with that line; once it
#    passes the node is resumed by itself;
#  - the attack: a health program others may write is never run by root; its node is drained
#    ("refused: ... writable by group or others") until the file is fixed;
#  - schedd's metric mlsched_node_health_drains_total counts the drains by check;
#  - the gang watchdog ([watchdog] stall_after 10 s, drain_after 1): a 2-node gang whose ranks stop
#    advancing their step (MLSCHED_STATUS_FILE), rank 0 at step 3 and rank 1 at step 6, is
#    diagnosed: stack traces of both ranks (eu-stack or gdb, as the job's user) land in its working
#    directory, rank 0's node is drained ("watchdog: rank 0 behind (step 3 of 6) ..."), the gang is
#    requeued (reason Stalled), mlq --explain tells the story, and attempt 2 completes elsewhere.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=node-health-e2e
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: health programs run as root (agentd is root)"; exit 0; fi
FAKE_NVML="$BIN/tests/agentd/libfake-nvml.so"
[ -f "$FAKE_NVML" ] || { echo "$E2E_NAME: SKIPPED: $FAKE_NVML is not built"; exit 0; }
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
POLICY="$MLSCHED_STATE/policy.toml"
cat "$ROOT/policies/default.toml" > "$POLICY"
cat >> "$POLICY" <<'TOML'

[health]
action = "drain-and-requeue"
requeue_grace = "5s"
auto_resume = true

[watchdog]
stall_after = "10s"
drain_after = 1
requeue_grace = "5s"
TOML
# The health programs live where only root may change them (a directory of root's, 0755, under
# the sticky /tmp): agentd refuses any other.
HDIR=$(mktemp -d /tmp/mlsched-health.XXXXXX)
chmod 755 "$HDIR"
for n in od-1 od-2 spot-1 spot-2; do
  printf '#!/bin/sh\nif [ -e %s/%s.fail ]; then\n  echo "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted"\n  exit 1\nfi\nexit 0\n' \
    "$HDIR" "$n" > "$HDIR/$n.sh"
  chmod 755 "$HDIR/$n.sh"
  : > "$MLSCHED_STATE/kmsg-$n"
done
printf '0 0 0 80000000000 0 0 0000:3b:00 0\n1 0 0 80000000000 0 0 0000:86:00 0\n' > "$MLSCHED_STATE/nvml"
export MLSCHED_FAKE_NVML="$MLSCHED_STATE/nvml" MLSCHED_POLICY="$POLICY"
export MLSCHED_AGENT_ARGS="--gpus test:2 --nvml-library $FAKE_NVML --health-interval 1 --health-kmsg $MLSCHED_STATE/kmsg-%n --health-program $HDIR/%n.sh --health-program-timeout 10"
cluster_up
trap 'bash "$ROOT/scripts/local-cluster.sh" down >/dev/null; rm -rf "$HDIR"' EXIT
OUT="$MLSCHED_STATE/out"
cd "$OUT"

node_state() { "$BIN/cli/mladmin" nodes --json | python3 -c "import json,sys; n=[x for x in json.load(sys.stdin) if x['name']=='$1'][0]; print(n['state'] + '|' + n['reason'])"; }
wait_node() {  # NODE PATTERN SECONDS WHAT
  for _ in $(seq 1 $(( $3 * 5 ))); do node_state "$1" | qgrep -- "$2" && return 0; sleep 0.2; done
  fail "node $1: $4; it is $(node_state "$1")"
}
metric() { curl -fsS "$MLSCHED_METRICS_URL" | awk -v k="$1" '$1 == k { v = $2 } END { print v + 0 }'; }
for n in od-1 od-2 spot-1 spot-2; do wait_node "$n" '^IDLE|$' 10 "healthy at the start"; done
say "4 nodes healthy: GPUs, kernel logs, disks, clocks and health programs pass"

# An Xid 79 under a running elastic mltrain gang: 8 epochs of Fashion-MNIST (88.5-89 % alone).
nodes_of() {  # the nodes of a job's current attempt, comma-separated
  "$BIN/cli/mladmin" show job "$1" --json | python3 -c "import json,sys; print(','.join(sorted({t['node'] for t in json.load(sys.stdin)['placement']})))"
}
attempt_of() { "$BIN/cli/mladmin" show job "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["attempt"])'; }
job=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J xid -n 3-4 -c 1 --gpus-per-task 1 --topology spread --spot allow -t 10:00 \
  --checkpoint-interval 1s -o 'xid-%j-%t.out' \
  --wrap "exec $BIN/trainer/mltrain --device cpu --epochs 8 --threads 1 --log-every 50 --checkpoint-every 100 \
    --checkpoint-url \$MLSCHED_CHECKPOINT_URL/xid-\$MLSCHED_JOB_ID --metrics-out metrics-\$MLSCHED_JOB_ID-\$RANK.json")
wait_for "$job" RUNNING 30
[ "$(field "$job" %A)" = "4/3-4" ] || fail "gang $job runs $(field "$job" %A) tasks, not 4/3-4"
for _ in $(seq 1 300); do grep -q "checkpoint .* committed" "$OUT/xid-$job-0.out" 2>/dev/null && break; sleep 0.1; done
bad=$("$BIN/cli/mladmin" show job "$job" --json | python3 -c "import json,sys; print([t['node'] for t in json.load(sys.stdin)['placement'] if t['rank'] == 1][0])")
echo "4,812,1234567,-;NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus." >> "$MLSCHED_STATE/kmsg-$bad"
wait_node "$bad" '^DRAIN.*|health: xid: GPU 1 XID 79 (fallen off the bus)$' 10 "not drained for the Xid"
for _ in $(seq 1 150); do
  [ "$(field "$job" %T)" = RUNNING ] && [ "$(attempt_of "$job")" -ge 2 ] && break
  sleep 0.2
done
[ "$(field "$job" %T)" = RUNNING ] && [ "$(attempt_of "$job")" -ge 2 ] || fail "gang $job was not requeued: $(field "$job" %T)"
case ",$(nodes_of "$job")," in *",$bad,"*) fail "gang $job restarted on $bad: $(nodes_of "$job")";; esac
[ "$(field "$job" %A)" = "3/3-4" ] || fail "gang $job restarted with $(field "$job" %A) tasks, not 3/3-4"
say "Xid 79 on $bad: drained (health: xid: GPU 1 XID 79), gang $job checkpoint-requeued onto $(nodes_of "$job")"
for _ in $(seq 1 600); do case "$(field "$job" %T)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) break;; esac; sleep 0.2; done
[ "$(field "$job" %T)" = COMPLETED ] || fail "gang $job did not complete: $(field "$job" %T) $(field "$job" %r)"
grep -q "resumed from .* on 3 ranks" "$OUT/xid-$job-0.out" || fail "attempt 2 did not resume from a checkpoint on 3 ranks: $(tail -5 "$OUT/xid-$job-0.out")"
acc=$(python3 -c "import json; print(json.load(open('$OUT/metrics-$job-0.json'))['test_accuracy'])")
python3 -c "import sys; sys.exit(0 if $acc >= 0.88 else 1)" || fail "gang $job reached test accuracy $acc, below 0.88"
say "gang $job shrank to 3 ranks off $bad and completed: test accuracy $acc"
"$BIN/cli/mladmin" resume "$bad" >/dev/null
wait_node "$bad" '^DRAIN.*|health: xid' 10 "an operator's resume should not outlast the sticky Xid"
say "resumed by hand, $bad is drained again at its next round: the Xid stays until a reboot"

# An NHC-style program failing on another node, then passing.
other=""
for n in od-1 od-2 spot-1 spot-2; do
  if [ -z "$other" ] && [ "$n" != "$bad" ]; then other=$n; fi
done
touch "$HDIR/$other.fail"
wait_node "$other" '^DRAIN.*|health: program: ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted$' 15 "not drained for its health program"
rm -f "$HDIR/$other.fail"
wait_node "$other" '^IDLE|$' 15 "not resumed once its health program passes"
say "health program failing on $other: drained with NHC's line; passing again: resumed by itself"

# The attack: a health program others may rewrite is not run as root.
cp "$HDIR/$other.sh" "$OUT/program.saved"
rm -f /tmp/mlsched-health-owned
chmod 777 "$HDIR/$other.sh"
printf '#!/bin/sh\ntouch /tmp/mlsched-health-owned\nexit 0\n' > "$HDIR/$other.sh"  # what anyone could now write
wait_node "$other" "^DRAIN.*|health: program: health program $HDIR/$other.sh refused: $HDIR/$other.sh is writable by group or others" 15 \
  "not drained for a health program anyone may write"
[ ! -e /tmp/mlsched-health-owned ] || { rm -f /tmp/mlsched-health-owned; fail "root ran a health program others may write"; }
cp "$OUT/program.saved" "$HDIR/$other.sh"
chmod 755 "$HDIR/$other.sh"
wait_node "$other" '^IDLE|$' 15 "not resumed once its health program is root's alone"
say "a health program writable by others: never run, $other drained until it was fixed"

[ "$(metric 'mlsched_node_health_drains_total{check="xid"}')" -ge 1 ] || fail "no xid drain counted"
[ "$(metric 'mlsched_node_health_drains_total{check="program"}')" -ge 2 ] || fail "fewer than 2 program drains counted"
"$BIN/cli/mladmin" nodes > "$OUT/nodes"
grep -q "health: xid: GPU 1 XID 79 (fallen off the bus)" "$OUT/nodes" || fail "mladmin nodes shows no REASON: $(cat "$OUT/nodes")"

# The gang watchdog: a 2-node gang stalls, rank 0 behind.
cat > "$OUT/stall.sh" <<'SH'
#!/bin/sh
[ "${MLSCHED_ATTEMPT:-1}" -ge 2 ] && exit 0
last=6; [ "$RANK" = 0 ] && last=3
i=1
while [ "$i" -le "$last" ]; do echo "{\"step\": $i}" > "$MLSCHED_STATUS_FILE"; i=$((i + 1)); sleep 1; done
exec sleep 1000
SH
chmod 755 "$OUT/stall.sh"
gang=$("$BIN/cli/mlsub" --parsable -D "$OUT" -n 2 -c 2 --spot allow "$OUT/stall.sh")
wait_for "$gang" RUNNING 30
rank0=$("$BIN/cli/mladmin" show job "$gang" --json | python3 -c "import json,sys; print([t['node'] for t in json.load(sys.stdin)['placement'] if t['rank'] == 0][0])")
for _ in $(seq 1 300); do [ "$(field "$gang" %T)" = COMPLETED ] && break; sleep 0.2; done
[ "$(field "$gang" %T)" = COMPLETED ] || fail "the stalled gang $gang was not restarted to completion: $(field "$gang" %T) $(field "$gang" %r)"
for r in 0 1; do
  f="$OUT/mlsched-stacks-$gang.1.$r.txt"
  [ -s "$f" ] || fail "no stack traces of rank $r at $f: $(ls "$OUT")"
  grep -q "^# mlsched gang watchdog: job $gang attempt 1 rank $r" "$f" && grep -q "sleep" "$f" || fail "rank $r's traces: $(head -20 "$f")"
done
wait_node "$rank0" "^DRAIN.*|watchdog: rank 0 behind (step 3 of 6) of job $gang in 1 user(s)' suspicions" 5 "not drained for its rank behind in the stall"
"$BIN/cli/mlq" --explain "$gang" > "$OUT/explain.stall"
grep -q "Watchdog: *restarted: stalled at step 6 for [0-9]* s; stacks in $OUT/mlsched-stacks-$gang.1.0.txt" "$OUT/explain.stall" \
  || fail "mlq --explain tells no stall: $(cat "$OUT/explain.stall")"
say "gang $gang stalled (rank 0 at step 3, rank 1 at 6): traces in its directory, $rank0 drained, restarted and completed"
say "PASSED"
