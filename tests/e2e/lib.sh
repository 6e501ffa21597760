# Shared by the end-to-end shell tests (sourced): logging, mlq queries, waiting for a job state.
# Needs ROOT (the checkout), BIN (the build), MLSCHED_STATE (the cluster's state dir) and E2E_NAME
# (log prefix); sets T0 (start time).
T0=$(date +%s)
say() { printf '[%s %3ds] %s\n' "$E2E_NAME" "$(( $(date +%s) - T0 ))" "$*"; }
fail() {
  say "FAILED: $*" >&2
  "$BIN/cli/mlq" -t all >&2 || true
  tail -20 "$MLSCHED_STATE/logs/schedd.log" >&2 || true
  exit 1
}
# qgrep ARGS...: `grep -q ARGS`, but reading all of its input. Under pipefail, `cmd | grep -q` fails
# (141) when grep exits at its first match while cmd still writes and gets SIGPIPE: bash's echo
# writes a multi-line value line by line, so `echo "$out" | grep -q` failed once on CI on output
# that held the line.
qgrep() { grep "$@" >/dev/null; }
# field JOB FORMAT: one mlq field of a job, e.g. field 12 %T
field() { "$BIN/cli/mlq" -j "$1" -h -o "$2"; }
# wait_for JOB STATE SECONDS
wait_for() {
  for _ in $(seq 1 $(( $3 * 5 ))); do [ "$(field "$1" %T)" = "$2" ] && return 0; sleep 0.2; done
  fail "job $1 did not reach $2 within $3 s (state $(field "$1" %T))"
}
# cluster_up: starts scripts/local-cluster.sh (stopped again when the script exits) and loads its
# env.sh (MLSCHED_SERVER, MLSCHED_CHECKPOINT_URL, ...).
# On the shipped policy, the gang watchdog runs far keener than its defaults (a stall after 60 s, a
# straggler over 60 s): no job of the e2e suite may trip it, and the test fails at its exit if one
# did (a false positive).
cluster_up() {
  if [ -z "${MLSCHED_POLICY:-}" ]; then
    export MLSCHED_POLICY="$MLSCHED_STATE/policy-watchdog.toml"
    mkdir -p "$MLSCHED_STATE"
    { cat "$ROOT/policies/default.toml"; printf '\n[watchdog]\nstall_after = "60s"\nstraggler_ratio = 0.5\nstraggler_window = "60s"\n'; } > "$MLSCHED_POLICY"
    WATCHDOG_QUIET=1
  fi
  trap 'watchdog_quiet; bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
  bash "$ROOT/scripts/local-cluster.sh" up >/dev/null
  # shellcheck disable=SC1091
  source "$MLSCHED_STATE/env.sh"
}
# watchdog_quiet: after a test on the keen watchdog policy (cluster_up), fails (exit 1) when schedd
# logged a stall or a straggler.
watchdog_quiet() {
  local rc=$?
  if [ "${WATCHDOG_QUIET:-0}" = 1 ] && grep -E "collecting stack traces|: straggler " "$MLSCHED_STATE"/logs/schedd*.log >&2 2>/dev/null; then
    say "FAILED: the gang watchdog fired on a healthy job (a false positive; lines above)" >&2
    bash "$ROOT/scripts/local-cluster.sh" down >/dev/null
    exit 1
  fi
  return $rc
}
# etcd_ctl ARGS...: etcdctl as schedd, with the etcd CA and schedd's etcd client certificate that
# `local-cluster.sh up --ha` wrote into env.sh (MLSCHED_ETCD_*), on ETCD_ENDPOINTS (default: every
# member, $MLSCHED_ETCD). etcdctl's own ETCDCTL_* variables are ignored.
etcd_ctl() {
  env -u ETCDCTL_CACERT -u ETCDCTL_CERT -u ETCDCTL_KEY -u ETCDCTL_USER -u ETCDCTL_INSECURE_SKIP_TLS_VERIFY ETCDCTL_API=3 \
    etcdctl --endpoints "${ETCD_ENDPOINTS:-$MLSCHED_ETCD}" --dial-timeout 2s --command-timeout 5s \
    --cacert "${MLSCHED_ETCD_CACERT:?no MLSCHED_ETCD_CACERT: source env.sh of local-cluster.sh up --ha}" \
    --cert "$MLSCHED_ETCD_CERT" --key "$MLSCHED_ETCD_KEY" "$@"
}
# Terminal tests in tmux: the screen of session $TMUX_TARGET on server $TMUX_SOCK, keys typed
# into it, and waiting (10 s) for a line matching PATTERN on it (else fail with WHAT).
pane() { tmux -S "$TMUX_SOCK" capture-pane -p -t "$TMUX_TARGET"; }
keys() { tmux -S "$TMUX_SOCK" send-keys -t "$TMUX_TARGET" "$@"; }
wait_pane() {  # PATTERN WHAT
  for _ in $(seq 1 50); do pane | qgrep -- "$1" && return 0; sleep 0.2; done
  fail "terminal: $2; the screen: $(pane)"
}
