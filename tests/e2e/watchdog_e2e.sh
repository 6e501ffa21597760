#!/usr/bin/env bash
# End to end (issue 33, the gang watchdog) with mltrain's test-only faults on the local cluster
# (4 agents of 4 CPUs, every gang spread one rank per node, two users: nobody and daemon):
#  - a hang: alice's and bob's elastic gangs (3-4 ranks) run mltrain with --test-fault-node od-1
#    --test-hang-at-step 40 (the rank there wedges outside the all-reduce, deaf to SIGTERM). Each
#    stall is found within stall_after + 30 s, stack traces of every rank land in the user's
#    directory, od-1 is suspected (its rank is outside the collective while the others wait in
#    it), each gang is checkpoint-requeued and restarts on 3 ranks without od-1, and completes.
#    Two users' suspicions drain od-1 ("watchdog: rank N outside the collective ..."); one user's
#    alone would only steer that user's own job away (tests/server/watchdog_test.cc);
#  - a straggler: the agent of spot-2 gets a cgroup CPU quota (5 % of a CPU for everything it
#    runs); the two users' gangs (a model large enough that computing, not waiting, takes a rank's
#    CPU) are found straggling there over straggler_window (60 s), spot-2 is drained ("watchdog:
#    straggler (...)"), and the gangs restart without it;
#  - a user cannot write another user's status file (so cannot make that job look hung).
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=watchdog-e2e
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: jobs of two users need agentd as root"; exit 0; fi
command -v setpriv >/dev/null || { echo "$E2E_NAME: SKIPPED: setpriv (util-linux) is missing"; exit 0; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "$E2E_NAME: SKIPPED: no Fashion-MNIST"; exit 0; }
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
chmod 755 "$MLSCHED_STATE" "$MLSCHED_STATE/out"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
POLICY="$MLSCHED_STATE/policy.toml"
cat "$ROOT/policies/default.toml" > "$POLICY"
cat >> "$POLICY" <<'TOML'

[watchdog]
stall_after = "10s"
drain_after = 2
requeue_grace = "3s"
straggler_ratio = 0.5
straggler_window = "60s"
TOML
export MLSCHED_POLICY="$POLICY" MLSCHED_OBJECT_STORE=dir AGENT_CPUS=4
cluster_up
OUT="$MLSCHED_STATE/out"
cd "$OUT"
ALICE=65534 BOB=1
for u in alice:$ALICE bob:$BOB; do mkdir -p "$OUT/${u%%:*}"; chown "${u#*:}:${u#*:}" "$OUT/${u%%:*}"; chmod 700 "$OUT/${u%%:*}"; done
as() { local uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"; }
# The checkpoints go to a directory each user owns.
submit() {  # UID DIR NAME MLTRAIN-ARGS... (later arguments override earlier ones)
  local uid=$1 dir=$2 name=$3; shift 3
  as "$uid" "$BIN/cli/mlsub" --parsable -D "$dir" -J "$name" -n 3-4 -c 1 --topology spread --spot allow -t 10:00 \
    --checkpoint-interval 1s -o "$name-%j-%t.out" \
    --wrap "exec $BIN/trainer/mltrain --threads 1 --train-limit 8192 --test-limit 1000 --hidden 32 --batch-size 64 --log-every 5 \
      --checkpoint-every 10 --collective-timeout 600 --checkpoint-url file://$dir/ckpt-\$MLSCHED_JOB_ID --metrics-out metrics-\$MLSCHED_JOB_ID-\$RANK.json $*"
}
node_state() { "$BIN/cli/mladmin" nodes --json | python3 -c "import json,sys; n=[x for x in json.load(sys.stdin) if x['name']=='$1'][0]; print(n['state'] + '|' + n['reason'])"; }
wait_node() {  # NODE PATTERN SECONDS WHAT
  for _ in $(seq 1 $(( $3 * 5 ))); do node_state "$1" | qgrep -- "$2" && return 0; sleep 0.2; done
  fail "node $1: $4; it is $(node_state "$1")"
}
nodes_of() {  # the nodes of a job's current attempt, comma-separated
  "$BIN/cli/mladmin" show job "$1" --json | python3 -c "import json,sys; print(','.join(sorted({t['node'] for t in json.load(sys.stdin)['placement']})))"
}
wait_attempt() {  # JOB ATTEMPT SECONDS
  for _ in $(seq 1 $(( $3 * 5 ))); do
    [ "$("$BIN/cli/mladmin" show job "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["attempt"])')" -ge "$2" ] &&
      [ "$(field "$1" %T)" = RUNNING ] && return 0
    sleep 0.2
  done
  fail "job $1 is not running attempt $2 within $3 s: $(field "$1" %T) $(field "$1" %r)"
}

# 1. The hang: both users' gangs wedge on od-1 at step 40.
HANG="--epochs 6 --test-fault-node od-1 --test-hang-at-step 40"
a=$(submit $ALICE "$OUT/alice" hang "$HANG")
b=$(submit $BOB "$OUT/bob" hang "$HANG")
wait_for "$a" RUNNING 30
wait_for "$b" RUNNING 30
[ "$(field "$a" %A)" = "4/3-4" ] && [ "$(field "$b" %A)" = "4/3-4" ] || fail "gangs not on 4 ranks: $(field "$a" %A) $(field "$b" %A)"
# A user cannot touch the other's status files (nor read them).
jd="$MLSCHED_STATE/agents/od-2/jobs/$a.1"
[ -d "$jd" ] || fail "no job directory $jd"
if as $BOB sh -c "echo '{\"step\": 0}' > '$jd/status-1.json'" 2>/dev/null; then fail "bob wrote alice's status file $jd/status-1.json"; fi
say "alice's job $a and bob's job $b run on 4 ranks each; bob cannot write alice's status file"
t0=$(date +%s)
# Found within stall_after (10 s) + the diagnosis (at most 30 s) of the hang (a second after the start).
wait_node od-1 "^DRAIN.*|watchdog: rank [0-9] outside the collective of job [0-9]* in 2 user(s)' suspicions" 45 \
  "not drained after both users' gangs stalled on it"
say "od-1 drained $(( $(date +%s) - t0 )) s after the gangs started: $(node_state od-1 | cut -d'|' -f2)"
for j in "$a" "$b"; do
  dir=$OUT/alice; [ "$j" = "$b" ] && dir=$OUT/bob
  for r in 0 1 2 3; do
    f="$dir/mlsched-stacks-$j.1.$r.txt"
    [ -s "$f" ] || fail "no stack traces of job $j rank $r at $f: $(ls "$dir")"
  done
  "$BIN/cli/mlq" --explain "$j" > "$OUT/explain.$j"
  grep -q "Watchdog: *restarted: stalled at step [0-9]* for [0-9]* s; stacks in .*suspected od-1: rank [0-9] outside the collective" \
    "$OUT/explain.$j" || fail "mlq --explain of $j tells no stall on od-1: $(cat "$OUT/explain.$j")"
done
grep -l -E "InjectTestFaults|TrainStep|nanosleep" "$OUT"/alice/mlsched-stacks-"$a".1.*.txt >/dev/null || fail "the wedged rank's traces do not show where it hangs"
for j in "$a" "$b"; do
  wait_attempt "$j" 2 60
  case ",$(nodes_of "$j")," in *,od-1,*) fail "job $j restarted on od-1: $(nodes_of "$j")";; esac
done
for j in "$a" "$b"; do
  for _ in $(seq 1 450); do case "$(field "$j" %T)" in COMPLETED|FAILED|CANCELLED|TIMEOUT) break;; esac; sleep 0.2; done
  [ "$(field "$j" %T)" = COMPLETED ] || fail "job $j did not complete after its restart: $(field "$j" %T)"
done
acc=$(python3 -c "import json; print(json.load(open('$OUT/alice/metrics-$a-0.json'))['test_accuracy'])")
say "both gangs restarted on 3 ranks without od-1 and completed (alice's accuracy $acc)"

# 2. The straggler: spot-2's agent throttled to 5 % of a CPU (its cgroup, so every task there),
# from before the gangs start (cgroup v1 refuses a parent quota below its children's); where the
# agent has no CPU controller, mltrain's --test-slow-factor. Gloo over TCP: waiting ranks sleep in
# recv instead of spinning on shared memory, so a throttled rank's lost CPU shows in its compute.
"$BIN/cli/mladmin" resume od-1 >/dev/null
"$BIN/cli/mladmin" drain od-1 --reason "kept out of the straggler test" >/dev/null
throttled=""
# The agent's cgroup: mlsched-NODE-<FNV-1a of its canonical work directory> (agentd/cgroups.cc).
base=$(python3 -c "import os,sys; h=2166136261
for c in os.path.realpath(sys.argv[1]).encode(): h=((h^c)*16777619)&0xffffffff
print('mlsched-spot-2-%08x' % h)" "$MLSCHED_STATE/agents/spot-2")
unthrottle() {
  while read -r d; do
    if [ -f "$d/cpu.max" ]; then echo "max 100000" > "$d/cpu.max" || true
    elif [ -f "$d/cpu.cfs_quota_us" ]; then echo -1 > "$d/cpu.cfs_quota_us" || true; fi
  done < <(find /sys/fs/cgroup -maxdepth 5 -type d -name "$base" 2>/dev/null)
}
trap 'watchdog_quiet; bash "$ROOT/scripts/local-cluster.sh" down >/dev/null; unthrottle' EXIT
while read -r d; do
  if [ -f "$d/cpu.max" ]; then echo "5000 100000" > "$d/cpu.max" && throttled=$d
  elif [ -f "$d/cpu.cfs_quota_us" ]; then echo 100000 > "$d/cpu.cfs_period_us" && echo 5000 > "$d/cpu.cfs_quota_us" && throttled=$d
  fi
done < <(find /sys/fs/cgroup -maxdepth 5 -type d -name "$base" 2>/dev/null)
SLOW="--epochs 1000 --hidden 1024 --batch-size 128 --no-shm-allreduce"
[ -n "$throttled" ] || { SLOW="$SLOW --test-fault-node spot-2 --test-slow-factor 8"; throttled="no CPU controller: --test-slow-factor 8"; }
a=$(submit $ALICE "$OUT/alice" slow "$SLOW")
b=$(submit $BOB "$OUT/bob" slow "$SLOW")
wait_for "$a" RUNNING 30
wait_for "$b" RUNNING 30
[ "$(field "$a" %A)" = "3/3-4" ] && [ "$(field "$b" %A)" = "3/3-4" ] || fail "gangs not on 3 ranks: $(field "$a" %A) $(field "$b" %A)"
say "spot-2 throttled ($throttled); alice's $a and bob's $b on od-2, spot-1, spot-2"
t0=$(date +%s)
wait_node spot-2 "^DRAIN.*|watchdog: straggler (.* s of compute per step against .* s on the other nodes over 60 s) of job [0-9]* in 2 user(s)' suspicions" 150 \
  "not drained as a straggler"
say "spot-2 drained as a straggler $(( $(date +%s) - t0 )) s after the gangs started: $(node_state spot-2 | cut -d'|' -f2)"
"$BIN/cli/mladmin" resume od-1 >/dev/null
for j in "$a" "$b"; do
  wait_attempt "$j" 2 60
  case ",$(nodes_of "$j")," in *,spot-2,*) fail "job $j restarted on spot-2: $(nodes_of "$j")";; esac
  "$BIN/cli/mlq" --explain "$j" | qgrep "Watchdog: *restarted without straggler spot-2" || fail "mlq --explain of $j: $("$BIN/cli/mlq" --explain "$j")"
  as $([ "$j" = "$a" ] && echo $ALICE || echo $BOB) "$BIN/cli/mlcancel" "$j" >/dev/null
done
say "both gangs restarted without spot-2"
say "PASSED"
