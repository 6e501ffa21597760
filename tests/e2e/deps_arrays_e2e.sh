#!/usr/bin/env bash
# End to end, real daemons: job arrays and dependencies through mlsub/mlq. On the local cluster
# (4 agents, 2 CPUs each) an 8-element array with %2 runs at most 2 elements at once, each sees
# its SLURM_ARRAY_*/MLSCHED_ARRAY_* variables and writes %A_%a output; a job that depends on the
# whole array (afterok:ARRAY) waits with reason Dependency and runs after it; afterok on a failed
# job never holds (DependencyNeverSatisfied) while afternotok runs; singleton jobs never overlap;
# a checkpointing job is placed on spot, one without checkpoints on on-demand.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
export MLSCHED_OBJECT_STORE=dir
E2E_NAME=deps-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
OUT="$MLSCHED_STATE/out"
sub() { "$BIN/cli/mlsub" --parsable -D "$OUT" -c 1 -t 5:00 "$@"; }

arr=$(sub -J sweep --array=0-7%2 -o 'sweep-%A_%a.out' \
  --wrap 'echo "element $SLURM_ARRAY_TASK_ID of $MLSCHED_ARRAY_TASK_COUNT (array $MLSCHED_ARRAY_JOB_ID, job $MLSCHED_JOB_ID)"; sleep 1')
gather=$(sub -J gather -d "afterok:$arr" -o 'gather.out' --wrap 'cat sweep-*.out | wc -l')
say "array $arr (8 elements, %2) and job $gather (afterok:$arr) submitted"
[ "$(field "$gather" %r)" = Dependency ] || sleep 1
[ "$(field "$gather" %r)" = Dependency ] || fail "job $gather: reason $(field "$gather" %r), want Dependency"
ids=$("$BIN/cli/mlq" -j "$arr" -h -o %i | sort -t_ -k2n | tr '\n' ' ')
[ "$ids" = "${arr}_0 ${arr}_1 ${arr}_2 ${arr}_3 ${arr}_4 ${arr}_5 ${arr}_6 ${arr}_7 " ] || fail "mlq -j $arr lists '$ids'"
most=0
reasons=""
for _ in $(seq 1 150); do
  running=$("$BIN/cli/mlq" -j "$arr" -h -o %t | grep -c '^R$' || true)
  (( running > most )) && most=$running
  reasons=$( (echo "$reasons"; "$BIN/cli/mlq" -j "$arr" -h -t PD -o %r) | grep -v '^$' | sort -u)
  [ "$(field "$gather" %T)" = COMPLETED ] && break
  sleep 0.2
done
wait_for "$gather" COMPLETED 60
say "array done with at most $most elements running at once; pending reasons seen: $(echo $reasons)"
grep -qx JobArrayTaskLimit <<<"$reasons" || fail "no element of array $arr was seen waiting with reason JobArrayTaskLimit"
(( most <= 2 )) || fail "array $arr ran $most elements at once (limit %2)"
(( most >= 1 )) || fail "array $arr never seen running"
for t in 0 1 2 3 4 5 6 7; do
  grep -q "^element $t of 8 (array $arr, job $((arr + t)))$" "$OUT/sweep-${arr}_$t.out" || fail "sweep-${arr}_$t.out: $(cat "$OUT/sweep-${arr}_$t.out" 2>&1)"
done
[ "$(tr -d ' ' < "$OUT/gather.out")" = 8 ] || fail "gather saw $(cat "$OUT/gather.out") lines, want 8"
[ "$(field "${arr}_5" %T)" = COMPLETED ] || fail "mlq -j ${arr}_5 shows $(field "${arr}_5" %T)"

bad=$(sub -J fails --wrap 'exit 3')
wait_for "$bad" FAILED 30
never=$(sub -J never -d "afterok:$bad" --wrap 'true')
rescue=$(sub -J rescue -d "afternotok:$bad" --wrap 'true')
wait_for "$rescue" COMPLETED 30
[ "$(field "$never" %r)" = DependencyNeverSatisfied ] || fail "job $never: reason $(field "$never" %r)"
say "afterok on failed job $bad: $never pending ($(field "$never" %r)); afternotok: $rescue COMPLETED"
"$BIN/cli/mlcancel" "$never"

s1=$(sub -J solo -d singleton --wrap 'sleep 2')
s2=$(sub -J solo -d singleton --wrap 'sleep 1')
wait_for "$s1" RUNNING 30
[ "$(field "$s2" %T) $(field "$s2" %r)" = "PENDING Dependency" ] || fail "singleton $s2 is $(field "$s2" '%T %r') while $s1 runs"
wait_for "$s2" COMPLETED 30
e1=$("$BIN/cli/mlq" -j "$s1" -h -o %e); b2=$("$BIN/cli/mlq" -j "$s2" -h -o %S)
[[ ! "$b2" < "$e1" ]] || fail "singleton $s2 started ($b2) before $s1 ended ($e1)"
say "singletons $s1 then $s2 ran one after the other"

# Pools (policies/default.toml prices spot below on-demand): a job that checkpoints goes to spot,
# one that does not stays off spot (default --spot), --spot=never likewise.
ckpt=$(sub -J ckpt --checkpoint-interval 5m --wrap 'sleep 2')
plain=$(sub -J plain --wrap 'sleep 2')
wait_for "$ckpt" RUNNING 30
wait_for "$plain" RUNNING 30
[ "$(field "$ckpt" %g)" = spot ] || fail "checkpointing job $ckpt runs on $(field "$ckpt" %g), want spot"
[ "$(field "$plain" %g)" = on-demand ] || fail "job $plain without checkpoints runs on $(field "$plain" %g)"
json=$("$BIN/cli/mlq" -j "$ckpt" --json)
grep -q '"pools": *"spot"' <<<"$json" && grep -q '"spot": *"allow"' <<<"$json" || fail "mlq --json: $json"
say "pools: checkpointing job $ckpt on spot, job $plain (no checkpoints) on on-demand"
say "PASSED"
