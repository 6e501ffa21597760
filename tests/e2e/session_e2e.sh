#!/usr/bin/env bash
# End to end (issue 32): interactive sessions in a running job on the local cluster (TLS + MUNGE),
# as the job's user (nobody), through mlrun:
#  - a command in rank 0's cgroup, as the user, in the job's directory, its stdout, stderr and
#    exit status back; -l labels rank 1's lines; a missing command's error;
#  - a real terminal (tmux): mlrun --pty sh -i shows its prompt and echo, `stty size` follows a
#    resize of the local window, Ctrl-C interrupts a remote `sleep 100` and the shell survives,
#    `exit 3` ends mlrun with 3; the pty is the user's (crw--w---- nobody tty) and no root process
#    has it as its controlling terminal (no TIOCSTI into agentd);
#  - 100 MB through `mlrun cat` (stdin there, stdout back) arrives intact (sha256);
#  - a client killed with SIGKILL has its remote process hung up; cancelling the job ends a
#    session in it;
#  - refused: another user's job, no --overlap, a rank that does not exist, a job not running.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=session-e2e
for tool in tmux setpriv sha256sum; do
  if ! command -v "$tool" >/dev/null; then echo "$E2E_NAME: SKIPPED: $tool is not installed (scripts/install-deps.sh)"; exit 0; fi
done
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs jobs as another user (agentd is root)"; exit 0; fi
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
TMUX_SOCK="$MLSCHED_STATE/tmux.sock"
export MLSCHED_SCHEDD_ARGS="--interactive-client-grace 2"
cluster_up
trap 'tmux -S "$TMUX_SOCK" kill-server 2>/dev/null || true; bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
cd "$OUT"  # the jobs' directory (nobody may write here)
chmod a+x "$MLSCHED_STATE"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
mlrun() { as_nobody "$BIN/cli/mlrun" "$@"; }
wait_state() {  # JOB STATE SECONDS
  for _ in $(seq 1 $(( $3 * 5 ))); do [ "$("$BIN/cli/mlq" -j "$1" -h -o %T)" = "$2" ] && return 0; sleep 0.2; done
  fail "job $1 is $("$BIN/cli/mlq" -j "$1" -h -o %T), not $2"
}

job=$(as_nobody "$BIN/cli/mlsub" --parsable -D "$OUT" -t 5:00 -J hold -n 2 -c 1 --wrap 'sleep 300')
wait_state "$job" RUNNING 30

# A command: output, error output, exit status, credentials, cgroup, working directory.
set +e
got=$(mlrun --jobid "$job" --rank 0 --overlap sh -c 'echo "uid=$(id -u) rank=$RANK job=$MLSCHED_JOB_ID pwd=$(pwd)"; grep -c "/$MLSCHED_JOB_ID.1/rank0" /proc/self/cgroup; echo oops >&2; exit 7' 2>"$OUT/err")
rc=$?
set -e
[ "$rc" = 7 ] || fail "mlrun's exit status is $rc, not the command's 7: $got $(cat "$OUT/err")"
echo "$got" | qgrep -x "uid=65534 rank=0 job=$job pwd=$OUT" || fail "not the task's user, rank, job or directory: $got"
[ "$(echo "$got" | sed -n 2p)" -ge 1 ] || fail "the command is not in the task's cgroup: $got"
grep -qx oops "$OUT/err" || fail "stderr did not come back: $(cat "$OUT/err")"
labels=$(mlrun --jobid "$job" --rank 1 --overlap -l sh -c 'echo one; echo two')
[ "$labels" = "$(printf '1: one\n1: two')" ] || fail "-l labels: $labels"
set +e
mlrun --jobid "$job" --rank 0 --overlap no-such-command-here 2>"$OUT/err"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "no-such-command-here" "$OUT/err" || fail "a missing command: rc $rc, $(cat "$OUT/err")"
say "a command ran in rank 0's task (its user, cgroup, directory), status 7 and stderr back, -l labels rank 1"

# Refusals: another user, no --overlap, no such rank.
expect_refused() {  # WHAT PATTERN COMMAND... (exit status 1, or $RC)
  local what=$1 pattern=$2; shift 2
  set +e
  "$@" >/dev/null 2>"$OUT/err"; local rc=$?
  set -e
  [ "$rc" = "${RC:-1}" ] && grep -q "$pattern" "$OUT/err" || fail "$what: rc $rc, $(cat "$OUT/err")"
}
expect_refused "another user's job" "only its owner or an operator" \
  setpriv --reuid=1 --regid=1 --clear-groups "$BIN/cli/mlrun" --jobid "$job" --overlap id
RC=2 expect_refused "no --overlap" "with --overlap" mlrun --jobid "$job" id
expect_refused "rank 5" "has no rank 5 (world size 2)" mlrun --jobid "$job" --rank 5 --overlap id
say "refused: another user's job, a session without --overlap, a rank that does not exist"

# 100 MB in and out.
head -c 100M /dev/urandom > "$OUT/big"
chmod 0644 "$OUT/big"
t0=$(date +%s.%N)
sum=$(mlrun --jobid "$job" --rank 0 --overlap cat < "$OUT/big" | sha256sum | cut -d' ' -f1)
t1=$(date +%s.%N)
[ "$sum" = "$(sha256sum < "$OUT/big" | cut -d' ' -f1)" ] || fail "100 MB through mlrun cat changed"
relayed=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
  "$MLSCHED_METRICS_URL" | awk '/^mlsched_session_bytes_total\{direction="out"\}/ { printf "%d", $2 }')
[ "${relayed:-0}" -ge 104857600 ] || fail "mlsched_session_bytes_total{direction=\"out\"} is '$relayed', not >= 100 MB"
say "100 MB through 'mlrun cat' (stdin up, stdout back) intact in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s; schedd counted $relayed bytes out"
rm -f "$OUT/big"

# A real terminal: tmux runs mlrun --pty.
tmux -S "$TMUX_SOCK" new-session -d -s s -x 100 -y 30 \
  "setpriv --reuid=65534 --regid=65534 --clear-groups env MLSCHED_SERVER=$MLSCHED_SERVER MLSCHED_TLS_CA=${MLSCHED_TLS_CA:-} MLSCHED_MUNGE_SOCKET=${MLSCHED_MUNGE_SOCKET:-} $BIN/cli/mlrun --jobid $job --rank 0 --overlap --pty sh -i; echo mlrun-exit=\$?; sleep 30"
TMUX_TARGET=s
wait_pane '^\$' "no prompt"
keys "PS1='remote> '" Enter
wait_pane '^remote>' "the prompt did not change (no echo?)"
keys 'echo "size $(stty size)"' Enter
wait_pane '^size 30 100' "stty size is not the window's 30x100"
tmux -S "$TMUX_SOCK" resize-window -t s -x 120 -y 40
sleep 0.5
keys 'echo "size $(stty size)"' Enter
wait_pane '^size 40 120' "stty size did not follow the resize to 40x120"
keys 'echo "pty $(tty) $(stat -c "%A %U %G" $(tty))"' Enter
wait_pane '^pty /dev/pts/[0-9]* crw--w---- nobody tty' "the pty is not the user's"
tty_path=$(pane | sed -n 's#^pty \(/dev/pts/[0-9]*\) .*#\1#p' | tail -1)
# No root process has the session's terminal as its controlling terminal (the remote shell has).
[ -n "$tty_path" ] || fail "no pty path on the screen: $(pane)"
holders=0
if [ -n "$tty_path" ]; then
  maj=$(( 0x$(stat -c %t "$tty_path") )); min=$(( 0x$(stat -c %T "$tty_path") ))
  want=$(( (maj << 8) | (min & 255) | ((min & ~255) << 12) ))
  for st in /proc/[0-9]*/stat; do
    pid=${st#/proc/}; pid=${pid%/stat}
    nr=$(awk '{sub(/.*\) /, ""); print $5}' "$st" 2>/dev/null) || continue
    [ "$nr" = "$want" ] || continue
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
    [ "$uid" != 0 ] || fail "root process $pid ($(cat "/proc/$pid/comm")) has the session's terminal $tty_path"
    holders=$((holders + 1))
  done
fi
[ "$holders" -ge 1 ] || fail "no process has $tty_path as its controlling terminal: the check above saw nothing"
keys 'sleep 100' Enter
sleep 1
keys C-c
# The shell's fresh prompt first: keys typed before it arrive as typeahead and print their output
# after the prompt, on its line (a loaded CI machine showed exactly that).
wait_pane '^remote> *$' "Ctrl-C did not interrupt the remote sleep (no fresh prompt)"
keys 'echo "survived $((40 + 2))"' Enter
wait_pane '^survived 42' "Ctrl-C did not interrupt the remote sleep, or the shell did not survive"
keys 'exit 3' Enter
wait_pane '^mlrun-exit=3' "mlrun did not exit with the shell's 3"
say "a terminal: prompt, stty size 30x100 then 40x120 after a resize, the pty nobody's ($tty_path, the controlling terminal of $holders process(es), none root's), Ctrl-C, exit 3"

# New allocations: mlrun -n 3 (a step on every rank, released COMPLETED), mlalloc with a step of
# 2 inside, Ctrl-C while pending cancels; an unchanged PyTorch DDP script as a 2-rank step.
state_of() { "$BIN/cli/mlq" -j "$1" -h -o %T; }
last_job() { "$BIN/cli/mlq" --states all -h -o %i | sort -n | tail -1; }
got=$(cd "$OUT" && mlrun -n 3 -c 1 --spot allow -l sh -c 'echo "$RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_WORLD_SIZE port ${MASTER_PORT:-none}"' | sort)
alloc=$(last_job)
[ "$(echo "$got" | cut -d' ' -f1-2)" = "$(printf '0: 0/3\n1: 1/3\n2: 2/3')" ] || fail "mlrun -n 3: $got"
! echo "$got" | qgrep "port none" || fail "a step has no MASTER_PORT: $got"
for _ in $(seq 1 50); do [ "$(state_of "$alloc")" = COMPLETED ] && break; sleep 0.1; done
[ "$(state_of "$alloc")" = COMPLETED ] || fail "mlrun's allocation $alloc is $(state_of "$alloc"), not released COMPLETED"
set +e
inner=$(cd "$OUT" && as_nobody "$BIN/cli/mlalloc" -Q -n 3 -c 1 --spot allow sh -c "echo \"alloc \$MLSCHED_JOB_ID \$MLSCHED_NTASKS \$SLURM_JOB_ID \$MLSCHED_NODELIST\"; $BIN/cli/mlrun -n 2 -l sh -c 'echo step \$RANK/\$WORLD_SIZE'; exit 4" 2>"$OUT/err")
rc=$?
set -e
alloc=$(last_job)
[ "$rc" = 4 ] || fail "mlalloc's status is $rc, not its command's 4: $inner $(cat "$OUT/err")"
echo "$inner" | qgrep "^alloc $alloc 3 $alloc " || fail "mlalloc's environment: $inner"
[ "$(echo "$inner" | grep '^[01]: step' | sort | tr '\n' ';')" = "0: step 0/2;1: step 1/2;" ] || fail "the step in mlalloc: $inner"
grep -q "relinquishing job allocation $alloc" "$OUT/err" || fail "mlalloc did not release: $(cat "$OUT/err")"
for _ in $(seq 1 50); do [ "$(state_of "$alloc")" = COMPLETED ] && break; sleep 0.1; done
[ "$(state_of "$alloc")" = COMPLETED ] || fail "mlalloc's allocation $alloc is $(state_of "$alloc") after its shell"
# 7 CPUs while 6 are free: pending; Ctrl-C cancels it.
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" -n 7 -c 1 --spot allow true 2>"$OUT/err" &
client=$!
for _ in $(seq 1 100); do j=$(last_job); [ "$j" != "$alloc" ] && [ "$(state_of "$j")" = PENDING ] && break; sleep 0.1; done
pending=$(last_job)
[ "$(state_of "$pending")" = PENDING ] || fail "mlrun -n 7 did not wait: job $pending is $(state_of "$pending")"
kill -INT "$client"
set +e
wait "$client"; rc=$?
set -e
[ "$rc" = 130 ] && [ "$(state_of "$pending")" = CANCELLED ] || fail "Ctrl-C while pending: rc $rc, job $pending $(state_of "$pending"): $(cat "$OUT/err")"
grep -q "pending" "$OUT/err" || fail "no status line while pending: $(cat "$OUT/err")"
msg="mlrun -n 3 ran on 3 ranks and released its allocation; mlalloc ran a 2-rank step and released (exit 4); Ctrl-C while pending cancelled"
if /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  mkdir -p "$OUT/code" && cp "$ROOT/tests/e2e/data/ddp_check.py" "$OUT/code/" && chmod -R a+rX "$OUT/code"
  ddp=$(cd "$OUT" && mlrun -n 2 -c 2 --spot allow -l /usr/bin/python3 "$OUT/code/ddp_check.py" 2>&1) || fail "PyTorch DDP through mlrun -n 2: $ddp"
  [ "$(echo "$ddp" | grep -c 'weights_equal True')" = 2 ] || fail "PyTorch DDP through mlrun -n 2: $ddp"
  msg="$msg; an unchanged PyTorch DDP script trained as a 2-rank step"
fi
say "$msg"

# An allocation whose client is killed is cancelled after the grace (2 s here): mlalloc's and
# mlrun's.
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlalloc" -Q -n 1 -c 1 sleep 3210 >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 100); do j=$(last_job); [ "$j" != "$pending" ] && [ "$(state_of "$j")" = RUNNING ] && break; sleep 0.1; done
orphan=$(last_job)
[ "$(state_of "$orphan")" = RUNNING ] || fail "mlalloc's allocation $orphan did not start: $(state_of "$orphan")"
kill -9 "$client"
pkill -u 65534 -x -f 'sleep 3210' || true
t0=$(date +%s)
for _ in $(seq 1 100); do [ "$(state_of "$orphan")" = CANCELLED ] && break; sleep 0.1; done
[ "$(state_of "$orphan")" = CANCELLED ] || fail "the allocation $orphan of a killed mlalloc is $(state_of "$orphan"), not cancelled"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" -Q -n 1 -c 1 sleep 3211 >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 100); do pgrep -u 65534 -f '^sleep 3211$' >/dev/null && break; sleep 0.1; done
orphan2=$(last_job)
kill -9 "$client"
for _ in $(seq 1 100); do [ "$(state_of "$orphan2")" = CANCELLED ] && break; sleep 0.1; done
[ "$(state_of "$orphan2")" = CANCELLED ] || fail "the allocation $orphan2 of a killed mlrun is $(state_of "$orphan2"), not cancelled"
grep -q "job $orphan: its interactive client went away" "$MLSCHED_STATE/logs/schedd.log" || fail "schedd did not say why it cancelled $orphan"
say "allocations of a killed mlalloc ($orphan) and a killed mlrun ($orphan2) were cancelled after the 2 s grace"

# A reload in place (SIGHUP, as a package upgrade's `systemctl reload`) while a session is open
# waits for it: the session runs on undisturbed; once it ended agentd reloads and keeps the job's
# task, and a new session joins the adopted task.
node0=$("$BIN/cli/mladmin" show job "$job" | sed -n 's/^ *Tasks=//p' | tr ' ' '\n' | grep '^0:' | cut -d: -f2)
apid=$(cat "$MLSCHED_STATE/pids/agent-$node0")
alog="$MLSCHED_STATE/logs/agent-$node0.log"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap \
  sh -c 'sleep 2.5 && echo session-done' > "$OUT/deferred.out" 2>&1 &
client=$!
for _ in $(seq 1 50); do pgrep -u 65534 -f '^sleep 2.5$' >/dev/null && break; sleep 0.1; done
pgrep -u 65534 -f '^sleep 2.5$' >/dev/null || fail "the session's sleep did not start"
kill -HUP "$apid"
for _ in $(seq 1 50); do grep -q "reload refused for now: 1 interactive session" "$alog" && break; sleep 0.1; done
grep -q "reload refused for now: 1 interactive session" "$alog" || fail "agentd did not defer its reload: $(tail -5 "$alog")"
set +e
wait "$client"; rc=$?
set -e
[ "$rc" = 0 ] && grep -qx session-done "$OUT/deferred.out" || fail "the session was disturbed by the reload: rc $rc, $(cat "$OUT/deferred.out")"
for _ in $(seq 1 50); do grep -q "task $job\.1/0: pid [0-9]* adopted after a reload" "$alog" && break; sleep 0.1; done
grep -q "task $job\.1/0: pid [0-9]* adopted after a reload" "$alog" || fail "no reload after the session ended: $(tail -5 "$alog")"
kill -0 "$apid" || fail "agentd on $node0 is gone"
[ "$("$BIN/cli/mlq" -j "$job" -h -o %T)" = RUNNING ] || fail "job $job is not RUNNING after the reload"
for _ in $(seq 1 50); do
  got=$(mlrun --jobid "$job" --rank 0 --overlap sh -c 'echo "after-reload $RANK"' 2>/dev/null) && break; sleep 0.2
done
[ "$got" = "after-reload 0" ] || fail "a session into the adopted task: $got"
say "a reload with a session open waited for its end (session undisturbed), then kept the job's task; a new session joined it"

# A client killed with SIGKILL: its process is hung up.
# setpriv execs mlrun: $! is mlrun itself, not a subshell
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap sleep 4321 >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 50); do pgrep -u 65534 -f '^sleep 4321$' >/dev/null && break; sleep 0.1; done
pgrep -u 65534 -f '^sleep 4321$' >/dev/null || fail "the session's sleep did not start"
kill -9 "$client"
for _ in $(seq 1 100); do pgrep -u 65534 -f '^sleep 4321$' >/dev/null || break; sleep 0.1; done
! pgrep -u 65534 -f '^sleep 4321$' >/dev/null || fail "the process of a client that was killed still runs"
say "a killed client's process was hung up"

# Cancelling the job ends its sessions.
# setpriv execs mlrun: $! is mlrun itself, not a subshell
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlrun" --jobid "$job" --rank 0 --overlap sleep 4322 >/dev/null 2>&1 &
client=$!
for _ in $(seq 1 50); do pgrep -u 65534 -f '^sleep 4322$' >/dev/null && break; sleep 0.1; done
as_nobody "$BIN/cli/mlcancel" "$job"
set +e
for _ in $(seq 1 150); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
kill -0 "$client" 2>/dev/null && fail "mlrun still runs after its job was cancelled"
wait "$client"; rc=$?
set -e
[ "$rc" != 0 ] || fail "a session of a cancelled job exited 0"
expect_refused "a job that ended" "not running" mlrun --jobid "$job" --overlap id
say "cancelling the job ended its session (mlrun exit $rc); a session in an ended job is refused"
