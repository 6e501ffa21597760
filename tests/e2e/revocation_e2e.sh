#!/usr/bin/env bash
# End to end, real daemons: node certificate revocation (issue 29). On the local cluster (one
# schedd with --tls-crl tls/crl.pem, 4 agents on mutual TLS), node od-1 is lost: the admin runs
# `scripts/mlsched-certs.sh tls revoke od-1`, and without restarting schedd:
#   - od-1's running agent has its session closed and its reconnects refused (its log and schedd's
#     say revoked), within 30 s of the revocation;
#   - od-1's agent restarted with its old certificate (as a thief would use it) is refused and never
#     registers, while od-2's agent, restarted the same way, registers again;
#   - `mlsched-certs.sh tls node od-1` gives the rebuilt node a new certificate, which the running
#     agent picks up at its next reconnect and registers with.
# Environment: MLSCHED_BUILD_DIR, MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE"
E2E_NAME=revocation-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
cluster_up
TLS="$MLSCHED_STATE/tls"
[ -f "$TLS/crl.pem" ] || fail "local-cluster.sh made no CRL"
pgrep -f -- "--tls-crl $TLS/crl.pem" >/dev/null || fail "schedd does not run with --tls-crl"

# restart_agent NODE: stops NODE's agentd and starts it again with the same command line; prints
# the number of lines its log had before, so that only what follows is looked at.
restart_agent() {
  local pidf="$MLSCHED_STATE/pids/agent-$1" pid cmd log="$MLSCHED_STATE/logs/agent-$1.log"
  pid=$(cat "$pidf")
  mapfile -d '' cmd < "/proc/$pid/cmdline"
  kill "$pid"
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wc -l < "$log"
  setsid "${cmd[@]}" >> "$log" 2>&1 < /dev/null &
  echo $! > "$pidf"
}
# since NODE LINES PATTERN: whether NODE's log matches PATTERN after its first LINES lines.
since() { tail -n +"$(( $2 + 1 ))" "$MLSCHED_STATE/logs/agent-$1.log" | qgrep -aiE "$3"; }

serial=$(openssl x509 -in "$TLS/nodes/od-1.pem" -noout -serial | cut -d= -f2)
n1=$(wc -l < "$MLSCHED_STATE/logs/agent-od-1.log")
bash "$ROOT/scripts/mlsched-certs.sh" "$TLS" revoke od-1 >/dev/null
openssl crl -in "$TLS/crl.pem" -noout -text | qgrep "$serial" || fail "crl.pem does not list od-1's serial $serial"
say "od-1's certificate (serial $serial) revoked; crl.pem rewritten"
# od-1's agent keeps running with its session open: schedd closes it once it has read the new CRL
# (at most 10 s), and refuses the agent's reconnects.
for _ in $(seq 1 150); do since od-1 "$n1" 'revoked' && break; sleep 0.2; done
since od-1 "$n1" 'revoked' || fail "od-1's agent was not told its certificate is revoked within 30 s"
grep -aqi 'revoked' "$MLSCHED_STATE/logs/schedd.log" || fail "schedd did not log the revoked certificate"
say "od-1's open session was closed and its reconnects refused: $(tail -n +"$((n1 + 1))" "$MLSCHED_STATE/logs/agent-od-1.log" |
  grep -ai -m1 -o 'agent for node[^(]*' || true)"
# A restart (a thief's agentd with the stolen files) changes nothing; od-2 restarted the same way
# registers again.
n1=$(restart_agent od-1)
n2=$(restart_agent od-2)
for _ in $(seq 1 150); do
  since od-2 "$n2" 'registered with schedd' && since od-1 "$n1" 'revoked' && break
  sleep 0.2
done
since od-2 "$n2" 'registered with schedd' || fail "positive control: od-2's agent did not register again"
since od-1 "$n1" 'revoked' || fail "od-1's restarted agent was not told its certificate is revoked"
sleep 3
since od-1 "$n1" 'registered with schedd' && fail "od-1 registered with a revoked certificate"
say "od-1's agent restarted with the revoked certificate is refused; od-2 restarted registers"

# The rebuilt node gets a new certificate; the agent, still retrying, uses it at its next reconnect.
bash "$ROOT/scripts/mlsched-certs.sh" "$TLS" node od-1 >/dev/null
[ "$(openssl x509 -in "$TLS/nodes/od-1.pem" -noout -serial | cut -d= -f2)" != "$serial" ] || fail "the new certificate has the old serial"
for _ in $(seq 1 300); do since od-1 "$n1" 'registered with schedd' && break; sleep 0.2; done
since od-1 "$n1" 'registered with schedd' || fail "od-1 did not register with its new certificate within 60 s"
say "passed: a revoked node certificate is refused without restarting schedd; the reissued one registers"
