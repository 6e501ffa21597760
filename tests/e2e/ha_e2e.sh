#!/usr/bin/env bash
# End to end, real daemons: HA on etcd (issue 14, tests a-d). scripts/local-cluster.sh up --ha
# starts 3 etcd members, 3 schedd replicas and 4 agents on loopback; clients submit short one-task
# jobs (each appends "JOBID ATTEMPT" to runs/JOBID) through the list of replicas while:
#   (a) the leader is killed with SIGKILL under the submission load: a follower takes over;
#   (b) the leader is stopped (SIGSTOP) past its lease and resumed (SIGCONT) with a submission
#       waiting on its socket: its late write is refused by etcd (the fence; counted in its log),
#       it steps down (exit 3) and no job of that submission exists;
#   (c) an etcd member is killed with SIGKILL: the replicas fail over to the other members;
#   (d) the leader is stopped with SIGTERM: it resigns and a follower leads within a second.
# Afterwards every acknowledged job is COMPLETED, etcd holds exactly the acknowledged jobs (no retry
# duplicated one) and every runs file has one line (nothing started twice). The replicas run with
# MLSCHED_FAILPOINT=ha-ignore-lease-loss: a leader does not step down on its own when its lease is
# gone (as if paused between the check and a write), so only the fence can stop its writes.
# etcd runs on client and peer mutual TLS with RBAC, as local-cluster.sh sets it up (the checks read
# it with schedd's etcd client certificate).
# Environment: MLSCHED_BUILD_DIR, MLSCHED_STATE (a scratch directory, wiped), HA_CLIENTS, HA_JOBS.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
CLIENTS=${HA_CLIENTS:-3} JOBS=${HA_JOBS:-30}
BASE=${MLSCHED_HA_BASE_PORT:-32379}
export MLSCHED_HA_BASE_PORT=$BASE
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out/runs"
E2E_NAME=ha-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
fail() {
  say "FAILED: $*" >&2
  "$BIN/cli/mladmin" ha status >&2 || true
  for f in "$MLSCHED_STATE"/logs/schedd-*.log; do echo "== $f" >&2; tail -n 15 "$f" >&2; done
  exit 1
}
trap 'bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
MLSCHED_FAILPOINT=ha-ignore-lease-loss bash "$ROOT/scripts/local-cluster.sh" up --ha >/dev/null
# shellcheck disable=SC1091
source "$MLSCHED_STATE/env.sh"
OUT="$MLSCHED_STATE/out"
export MLSCHED_RETRY=60  # the CLI retry budget: longer than any takeover below

# leader / epoch: the leader's address and epoch, once some replica names a leader (a replica that
# just started knows none until it has read the leader key); waits up to 30 s.
leader_status() {
  local j
  for _ in $(seq 1 300); do
    j=$("$BIN/cli/mladmin" ha status --json 2>/dev/null || true)
    grep -q '"leader": *"[0-9.]\+:[0-9]\+"' <<<"$j" && { echo "$j"; return 0; }
    sleep 0.1
  done
  echo "no replica names a leader" >&2
  return 1
}
leader() { leader_status | grep -o '"leader": *"[^"]*"' | grep -o '[0-9.]\+:[0-9]\+'; }
epoch() { leader_status | grep -o '"epoch": *[0-9]*' | grep -o '[0-9]*$'; }
replica_of() { echo $(( ${1##*:} - BASE - 19 )); }  # 127.0.0.1:PORT -> 1..3
child_pid() { cat "$MLSCHED_STATE/pids/schedd-$1.child"; }
# new_leader OLD_EPOCH [SKIP]: waits until a leader of a newer epoch answers (any replica: the
# restart loop may bring the old one back first); prints the seconds taken. SKIP: a replica left out
# of the status queries (a stopped one, which would only cost each query a connect timeout).
new_leader() {
  local old=$1 skip=${2:-} t0 l e servers=$MLSCHED_SERVER
  [ -n "$skip" ] && servers=$(tr ',' '\n' <<<"$MLSCHED_SERVER" | grep -vx "$skip" | paste -sd,)
  t0=$(date +%s.%N)
  while awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { exit !(a - b < 30) }'; do
    e=$(MLSCHED_SERVER=$servers epoch 2>/dev/null || true)
    l=$(MLSCHED_SERVER=$servers leader 2>/dev/null || true)
    if [ -n "$e" ] && [ "$e" -gt "$old" ] && [ -n "$l" ] && "$BIN/cli/mlq" --server "$l" -h -o %i >/dev/null 2>&1; then
      awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f\n", a - b }'
      return 0
    fi
    sleep 0.05
  done
  fail "no new leader within 30 s (old epoch: $old)"
}
submit_all() {  # client, count: submits COUNT jobs, appends each acknowledged id to acked.CLIENT
  local c=$1 i id
  for i in $(seq 1 "$2"); do
    id=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J "c$c-$i" -n 1 -c 1 -t 2:00 -o /dev/null \
      --wrap 'echo "$MLSCHED_JOB_ID $MLSCHED_ATTEMPT" >> "runs/$MLSCHED_JOB_ID"; sleep 0.$((RANDOM % 5))') ||
      { echo "client $c: submission $i failed" >&2; continue; }
    echo "$id" >> "$OUT/acked.$c"
  done
}

# (a) SIGKILL of the leader under load.
l=$(leader) || fail "no leader after start"
say "leader is $l; $CLIENTS clients submit $JOBS jobs each"
clients=()
for c in $(seq 1 "$CLIENTS"); do submit_all "$c" "$JOBS" & clients+=($!); done
sleep 3
l=$(leader) e=$(epoch)
kill -9 "$(child_pid "$(replica_of "$l")")"
took=$(new_leader "$e")
say "(a) leader $l killed with SIGKILL under load: $(leader) leads after $took s"
wait "${clients[@]}"

# (b) SIGSTOP past the lease, a submission waiting on its socket, SIGCONT: the fence refuses it.
l=$(leader) e=$(epoch)
r=$(replica_of "$l")
pid=$(child_pid "$r")
kill -STOP "$pid"
took=$(new_leader "$e" "$l")
say "(b) leader $l stopped (SIGSTOP): $(leader) leads after $took s"
MLSCHED_RETRY=0 "$BIN/cli/mlsub" --server "$l" --parsable -D "$OUT" -J late -n 1 --wrap true > "$OUT/late.out" 2>&1 &
late=$!
sleep 1
kill -CONT "$pid"
if wait "$late"; then fail "the deposed leader acknowledged a submission: $(cat "$OUT/late.out")"; fi
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the deposed leader did not step down"
refused=$(grep -o '[0-9]* write(s) refused by the fence' "$MLSCHED_STATE/logs/schedd-$r.log" | tail -1 | cut -d' ' -f1)
[ "${refused:-0}" -ge 1 ] || fail "the deposed leader's late write was not refused by the fence"
say "(b) resumed (SIGCONT): $refused late write(s) refused by etcd, the replica stepped down; mlsub said: $(cat "$OUT/late.out")"

# (c) SIGKILL of an etcd member while clients submit.
kill -9 "$(cat "$MLSCHED_STATE/pids/etcd-1")"
submit_all 9 10
[ "$(wc -l < "$OUT/acked.9")" -eq 10 ] || fail "submissions failed with one etcd member down"
say "(c) etcd-1 killed with SIGKILL: 10 more submissions acknowledged by $(leader)"

# (d) graceful handover.
l=$(leader) e=$(epoch)
kill -TERM "$(child_pid "$(replica_of "$l")")"
took=$(new_leader "$e")
say "(d) leader $l stopped with SIGTERM: $(leader) leads after $took s"
awk -v t="$took" 'BEGIN { exit !(t < 2) }' || fail "graceful handover took $took s"

# Exactly once.
acked=$(cat "$OUT"/acked.* | sort -n)
n_acked=$(wc -l <<<"$acked")
[ "$n_acked" -eq $((CLIENTS * JOBS + 10)) ] || fail "only $n_acked of $((CLIENTS * JOBS + 10)) submissions were acknowledged"
[ "$(sort -u <<<"$acked" | wc -l)" -eq "$n_acked" ] || fail "two submissions were acknowledged with the same job id"
deadline=$(( $(date +%s) + 180 ))
while :; do
  left=$("$BIN/cli/mlq" -t PD,R,CG -h -o '%i %T' | wc -l)
  [ "$left" -eq 0 ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "$left job(s) still pending or running"
  sleep 1
done
keys=$(ETCD_ENDPOINTS="${MLSCHED_ETCD#*,}" etcd_ctl get /mlsched/jobs/ --prefix --keys-only) || fail "etcdctl cannot read etcd"
stored=$(grep -c '^/mlsched/jobs/' <<<"$keys" || true)
[ "$stored" -eq "$n_acked" ] || fail "etcd holds $stored jobs for $n_acked acknowledged submissions (duplicates or a late job)"
lost=0 twice=0 not_done=0
for id in $acked; do
  state=$(field "$id" %T)
  [ "$state" = COMPLETED ] || { not_done=$((not_done + 1)); say "job $id is ${state:-missing}"; }
  [ -f "$OUT/runs/$id" ] || { lost=$((lost + 1)); say "job $id never ran"; continue; }
  [ "$(wc -l < "$OUT/runs/$id")" -eq 1 ] || { twice=$((twice + 1)); say "job $id ran more than once: $(tr '\n' ' ' < "$OUT/runs/$id")"; }
done
say "acknowledged $n_acked, in etcd $stored, not completed $not_done, never ran $lost, ran twice $twice"
[ "$not_done" -eq 0 ] && [ "$lost" -eq 0 ] && [ "$twice" -eq 0 ] || fail "exactly-once violated"
say "passed: SIGKILL, SIGSTOP/SIGCONT (fenced), etcd member SIGKILL and SIGTERM handover; $n_acked jobs, 0 lost, 0 duplicated, 0 run twice"
