#!/usr/bin/env bash
# End to end (issue 32): the policy's [interactive] and job steps on the local cluster, as nobody:
#  - refused: an interactive allocation in a partition [interactive] does not list, or longer than
#    its max_time (a batch job there is still taken);
#  - steps: mlrun inside mlalloc runs steps JOB.0 (2 tasks, exit 0: COMPLETED) and JOB.1 (exit 3:
#    FAILED 3), and mlrun --jobid into a batch job a step of it; `mlq --steps` lists them, --json too;
#  - a schedd restart: a live client watches again and keeps its allocation, a dead one loses it;
#  - idle release (idle_timeout 8 s, idle_warning 4 s): an allocation holding a silent `sleep` is
#    warned, released (CANCELLED, reason IdleTimeout) and its command hung up; one whose step
#    spins the CPU for 14 s without a byte of output, and one whose steps print every 2 s, are not;
#    one whose GPU is busy (NVML, tests/agentd/fake_nvml.cc) is not, until its GPU is idle;
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=interactive-policy-e2e
command -v setpriv >/dev/null || { echo "$E2E_NAME: SKIPPED: setpriv is not installed"; exit 0; }
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs jobs as another user (agentd is root)"; exit 0; fi
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
POLICY="$MLSCHED_STATE/policy.toml"
cat "$ROOT/policies/default.toml" > "$POLICY"
cat >> "$POLICY" <<'TOML'

[[partitions]]
name = "batch"
default_time_limit = "1h"
max_time_limit = "1d"

[interactive]
partitions = ["default"]
max_time = "30m"
idle_timeout = "8s"
idle_warning = "4s"
idle_cpu_below = 0.2
TOML
# Every agent has two "GPUs" whose utilization NVML reports from a file (tests/agentd/fake_nvml.cc).
NVML_FILE="$MLSCHED_STATE/nvml"
FAKE_NVML="$BIN/tests/agentd/libfake-nvml.so"
[ -f "$FAKE_NVML" ] || { echo "$E2E_NAME: SKIPPED: $FAKE_NVML is not built"; exit 0; }
printf '0 80 1000 80000000000\n1 80 1000 80000000000\n' > "$NVML_FILE"
export MLSCHED_FAKE_NVML="$NVML_FILE" MLSCHED_AGENT_ARGS="--gpus test:2 --nvml-library $FAKE_NVML"
export MLSCHED_POLICY="$POLICY" MLSCHED_SCHEDD_ARGS="--interactive-client-grace 5"
cluster_up
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
chmod a+x "$MLSCHED_STATE"
cd "$OUT"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# Refusals by [interactive]; batch jobs are not affected.
expect_refused() {  # WHAT PATTERN COMMAND...
  local what=$1 pattern=$2; shift 2
  set +e
  "$@" >/dev/null 2>"$OUT/err"; local rc=$?
  set -e
  [ "$rc" != 0 ] && grep -q "$pattern" "$OUT/err" || fail "$what: rc $rc, $(cat "$OUT/err")"
}
expect_refused "an allocation in partition batch" "partition 'batch' takes no interactive jobs; these do: default (policy .*policy.toml:[0-9]* \[interactive\] partitions)" \
  as_nobody "$BIN/cli/mlalloc" -Q -p batch -n 1 -c 1 true
expect_refused "a 2 h allocation" "time limit 2:00:00 exceeds the maximum of interactive jobs, 30:00 (policy .*\[interactive\] max_time)" \
  as_nobody "$BIN/cli/mlrun" -Q -t 2:00:00 -n 1 -c 1 true
batch=$(as_nobody "$BIN/cli/mlsub" --parsable -D "$OUT" -p batch -t 2:00:00 -n 1 -c 1 --wrap 'sleep 300')
wait_for "$batch" RUNNING 30
say "refused: an allocation in a partition [interactive] leaves out, one over its max_time; a 2 h batch job there runs"

# Steps: two in an allocation, one in the batch job; mlq --steps lists them.
as_nobody "$BIN/cli/mlalloc" -Q -n 2 -c 1 sh -c "$BIN/cli/mlrun -n 2 true; $BIN/cli/mlrun -n 1 sh -c 'exit 3'; echo \$MLSCHED_JOB_ID > $OUT/alloc_id" \
  >/dev/null 2>"$OUT/err" || true
alloc=$(cat "$OUT/alloc_id")
as_nobody "$BIN/cli/mlrun" --jobid "$batch" --overlap hostname >/dev/null
steps=$("$BIN/cli/mlq" --steps -h -j "$alloc,$batch")
[ "$(echo "$steps" | wc -l)" = 3 ] || fail "mlq --steps lists $(echo "$steps" | wc -l) steps, not 3: $steps"
for want in "$alloc.0 true COMPLETED 2 0" "$alloc.1 sh FAILED 1 3" "$batch.0 hostname COMPLETED 1 0"; do
  echo "$steps" | awk '{print $1, $2, $3, $4, $5}' | qgrep -x "$want" || fail "mlq --steps has no '$want': $steps"
done
host_node=$("$BIN/cli/mlq" -j "$batch" -h -o %N)
echo "$steps" | grep "^$batch.0 " | qgrep "$host_node\$" || fail "the batch job's step does not name its node $host_node: $steps"
"$BIN/cli/mlq" --steps --json -j "$alloc" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert [x["step_id"] for x in s] == [sys.argv[1] + ".0", sys.argv[1] + ".1"], s
assert s[1]["exit_code"] == 3 and s[1]["state"] == "FAILED" and s[0]["ntasks"] == 2 and len(s[0]["nodes"]) >= 1, s
assert all(x["user"] == "nobody" and x["end_time"] >= x["start_time"] > 0 for x in s), s' "$alloc" || fail "mlq --steps --json"
# A step's accounting: what its process used (getrusage of the reaped task, via its agent).
as_nobody "$BIN/cli/mlrun" --jobid "$batch" --overlap sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i + 1)); done' >/dev/null
"$BIN/cli/mlq" --steps --json -j "$batch" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert len(s) == 2 and s[1]["name"] == "sh" and s[1]["state"] == "COMPLETED", s
assert s[1]["cpu_s"] >= 0.1 and s[1]["max_rss_bytes"] > 0, s' || fail "the CPU-bound step's usage: $("$BIN/cli/mlq" --steps --json -j "$batch")"
setpriv --reuid=1 --regid=1 --clear-groups "$BIN/cli/mlq" --steps -h -j "$alloc" > "$OUT/other"
[ ! -s "$OUT/other" ] || fail "another user sees nobody's steps: $(cat "$OUT/other")"
say "steps: $alloc.0 (2 tasks) COMPLETED, $alloc.1 FAILED 3, $batch.0 in a batch job; --json; a step's CPU time and MaxRSS; hidden from other users"

# Idle release, in parallel: (a) a silent sleep is released, (b) a silent CPU-bound step and (c)
# steps printing every 2 s are not.
as_nobody "$BIN/cli/mlalloc" -n 1 -c 1 sleep 60 >/dev/null 2>"$OUT/idle.err" &
idle_pid=$!
as_nobody "$BIN/cli/mlalloc" -Q -n 1 -c 1 sh -c "$BIN/cli/mlrun -n 1 sh -c 'end=\$((\$(date +%s) + 14)); while [ \$(date +%s) -lt \$end ]; do :; done'; echo busy-survived" \
  >"$OUT/busy.out" 2>"$OUT/busy.err" &
busy_pid=$!
as_nobody "$BIN/cli/mlalloc" -Q -n 1 -c 1 sh -c "for i in 1 2 3 4 5 6 7; do $BIN/cli/mlrun -n 1 echo tick >/dev/null; sleep 2; done; echo chatty-survived" \
  >"$OUT/chatty.out" 2>"$OUT/chatty.err" &
chatty_pid=$!
set +e
wait "$idle_pid"; idle_rc=$?
wait "$busy_pid"; busy_rc=$?
wait "$chatty_pid"; chatty_rc=$?
set -e
idle_job=$(sed -n 's/^mlalloc: job allocation \([0-9]*\) granted.*/\1/p' "$OUT/idle.err")
grep -q "mlalloc: warning: idle for .*: released in 0:0[0-9] unless used" "$OUT/idle.err" || fail "no idle warning: $(cat "$OUT/idle.err")"
grep -q "mlalloc: warning: released: idle for .*idle_timeout 0:08" "$OUT/idle.err" || fail "no release message: $(cat "$OUT/idle.err")"
grep -q "job allocation $idle_job has been revoked: CANCELLED (IdleTimeout)" "$OUT/idle.err" || fail "not revoked: $(cat "$OUT/idle.err")"
[ "$idle_rc" = 129 ] || fail "the idle allocation's command was not hung up (mlalloc exited $idle_rc): $(cat "$OUT/idle.err")"
[ "$(field "$idle_job" %T) $(field "$idle_job" %r)" = "CANCELLED IdleTimeout" ] || fail "job $idle_job is $(field "$idle_job" %T) $(field "$idle_job" %r)"
[ "$busy_rc" = 0 ] && grep -qx busy-survived "$OUT/busy.out" || fail "the CPU-bound allocation was released (rc $busy_rc): $(cat "$OUT/busy.err")"
[ "$chatty_rc" = 0 ] && grep -qx chatty-survived "$OUT/chatty.out" || fail "the chatty allocation was released (rc $chatty_rc): $(cat "$OUT/chatty.err")"
! grep -q "warning: released" "$OUT/busy.err" "$OUT/chatty.err" || fail "a used allocation was released"
say "idle release: a silent sleep warned and released after 8 s (IdleTimeout, its command hung up: 129); a silent CPU-bound step of 14 s and steps printing every 2 s kept theirs"

# GPU use counts (NVML): an allocation holding a GPU at 80 % keeps it while silent and idle on
# the CPU; at 0 % it is released.
as_nobody "$BIN/cli/mlalloc" -n 1 -c 1 --gpus-per-task 1 sleep 120 >/dev/null 2>"$OUT/gpu.err" &
gpu_pid=$!
sleep 14
kill -0 "$gpu_pid" 2>/dev/null || fail "an allocation whose GPU is 80 % busy was released: $(cat "$OUT/gpu.err")"
! grep -q "warning" "$OUT/gpu.err" || fail "an allocation whose GPU is busy was warned: $(cat "$OUT/gpu.err")"
printf '0 0 1000 80000000000\n1 0 1000 80000000000\n' > "$NVML_FILE"
set +e
wait "$gpu_pid"; gpu_rc=$?
set -e
[ "$gpu_rc" = 129 ] && grep -q "warning: released: idle for .*GPU 0.00 % (below 5.00)" "$OUT/gpu.err" || \
  fail "the allocation whose GPU went idle was not released (rc $gpu_rc): $(cat "$OUT/gpu.err")"
say "GPU use (NVML): an allocation silent and CPU-idle but with its GPU 80 % busy kept it 14 s; at 0 % it was released"

# A schedd restart: watches die with it. The allocation whose client lives is watched again and
# kept; the one whose client was killed while schedd was down is cancelled after the grace (5 s).
pid=$(cat "$MLSCHED_STATE/pids/schedd")
mapfile -d '' cmd < "/proc/$pid/cmdline"
port=${MLSCHED_SERVER##*:}
for i in "${!cmd[@]}"; do [ "${cmd[$i]}" = 127.0.0.1:0 ] && cmd[$i]=127.0.0.1:$port; done
as_nobody "$BIN/cli/mlalloc" -Q -n 1 -c 1 sh -c "for i in \$(seq 1 14); do $BIN/cli/mlrun -n 1 echo tick >/dev/null 2>&1; sleep 2; done; echo kept" \
  >"$OUT/kept.out" 2>"$OUT/kept.err" &
kept_pid=$!
setsid setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlalloc" -n 1 -c 1 sh -c "for i in \$(seq 1 30); do $BIN/cli/mlrun -n 1 echo tick >/dev/null 2>&1; sleep 2; done" \
  >/dev/null 2>"$OUT/gone.err" &
gone_pid=$!
for _ in $(seq 1 50); do grep -q granted "$OUT/gone.err" 2>/dev/null && break; sleep 0.2; done
gone_job=$(sed -n 's/^mlalloc: job allocation \([0-9]*\) granted.*/\1/p' "$OUT/gone.err")
[ -n "$gone_job" ] || fail "the second allocation did not start: $(cat "$OUT/gone.err")"
sleep 1
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
kill -9 -- -"$gone_pid"; wait "$gone_pid" 2>/dev/null || true  # mlalloc and its shell
sleep 2
setsid "${cmd[@]}" >>"$MLSCHED_STATE/logs/schedd.log" 2>&1 < /dev/null &
echo $! > "$MLSCHED_STATE/pids/schedd"
disown
for _ in $(seq 1 100); do "$BIN/cli/mlq" -h -o %i >/dev/null 2>&1 && break; sleep 0.1; done
for _ in $(seq 1 75); do [ "$(field "$gone_job" %T)" = CANCELLED ] && break; sleep 0.2; done
[ "$(field "$gone_job" %T) $(field "$gone_job" %r)" = "CANCELLED ClientGone" ] || \
  fail "job $gone_job, whose client died while schedd was down, is $(field "$gone_job" %T) $(field "$gone_job" %r)"
set +e
wait "$kept_pid"; kept_rc=$?
set -e
[ "$kept_rc" = 0 ] && grep -qx kept "$OUT/kept.out" || fail "the allocation whose client lived was not kept across the restart (rc $kept_rc): $(cat "$OUT/kept.err")"
grep -q "an interactive allocation nobody watches" "$MLSCHED_STATE/logs/schedd.log" || fail "the restarted schedd did not adopt the unwatched allocations"
say "schedd restarted: the allocation whose client lived was watched again and kept; the one whose client died meanwhile was cancelled (ClientGone) after the grace"
"$BIN/cli/mlcancel" "$batch"
say "PASSED"
