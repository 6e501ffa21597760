#!/usr/bin/env bash
# End to end, adversarial (issue 29, etcd): HA mode's store is no way in. On a real HA local
# cluster (scripts/local-cluster.sh up --ha: 3 etcd members on client and peer mutual TLS with
# RBAC, 3 schedd replicas, 4 agents), an attacker on loopback with the stock etcdctl and curl, and a
# user's job submitted held with `--export DB_PASSWORD=<secret>` (its spec, with the secret, is in
# etcd under /mlsched/specs/):
#   (a) without a client certificate reads nothing under /mlsched/specs/ and writes no key;
#   (b) with a node certificate of the cluster CA (a compromised node's) neither;
#   (c) with a certificate from a CA of its own, named as the replicas' etcd user, neither;
#   (d) over plaintext http:// to a client port neither (gRPC and etcd's JSON gateway);
#   (e) gets no answer from a peer port without a member certificate (none, a node's, its own CA's,
#       or schedd's etcd client certificate: etcd's CA, but not a member);
#   (f) cannot add a replica on plaintext etcd: schedd --ha without --etcd-tls-ca and without
#       --ha-insecure exits 2 naming --ha-insecure (and --etcd-tls-ca without a client certificate
#       or login exits 2 too); one started with --ha-insecure never joins;
#   (g) with schedd's own etcd client certificate (stolen; defence in depth): RBAC confines it to
#       /mlsched/ (no other key, no user, role or auth change); job rows forged to uid 0 with a
#       mismatched user, or to a user that does not exist, and released, are quarantined by the
#       leader that takes over when the old one is killed and never run on an agent (a job
#       submitted after the takeover does run); a leader key written without a lease, and one
#       with a lease but a value no replica wrote, stop the cluster for less than 10 s.
# Positive controls make each refusal mean something: the same reads and writes with schedd's
# certificate succeed and find the secret, a member certificate opens the peer port, and etcd's
# root (password from its 0600 file) can list users.
# Environment: MLSCHED_BUILD_DIR, MLSCHED_STATE (a scratch directory, wiped), MLSCHED_HA_BASE_PORT
# (default 32579; ha_e2e.sh uses 32379, ha_archive_e2e.sh 32479, ha_bench.sh 32379 and 32429).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
BASE=${MLSCHED_HA_BASE_PORT:-32579}
export MLSCHED_HA_BASE_PORT=$BASE
unset MLSCHED_ETCD_TLS MLSCHED_ETCD_RBAC MLSCHED_HA_SCHEDD_ARGS
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
OUT="$MLSCHED_STATE/out"
E2E_NAME=ha-etcd-security-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
fail() {
  say "FAILED: $*" >&2
  "$BIN/cli/mladmin" ha status >&2 || true
  for f in "$MLSCHED_STATE"/logs/schedd-*.log; do echo "== $f" >&2; tail -n 15 "$f" >&2; done
  exit 1
}
rogue=""
cleanup() {
  [ -n "$rogue" ] && kill "$rogue" 2>/dev/null
  bash "$ROOT/scripts/local-cluster.sh" down >/dev/null
}
trap cleanup EXIT
bash "$ROOT/scripts/local-cluster.sh" up --ha >/dev/null
# shellcheck disable=SC1091
source "$MLSCHED_STATE/env.sh"
export MLSCHED_RETRY=30
TLS="$MLSCHED_STATE/tls"
EP1=${MLSCHED_ETCD%%,*}  # the first member's client port
PEER="127.0.0.1:$((BASE + 10))"
[ -n "${MLSCHED_ETCD_CERT:-}" ] && [ -f "$MLSCHED_ETCD_CERT" ] || fail "env.sh names no etcd client certificate"
[ -n "${MLSCHED_ETCD_ROOT_PASSWORD_FILE:-}" ] || fail "env.sh names no etcd root password file"
grep -q "$(cat "$MLSCHED_ETCD_ROOT_PASSWORD_FILE")" "$MLSCHED_STATE/env.sh" && fail "env.sh holds etcd's root password"
[ "$(stat -c %a "$MLSCHED_ETCD_ROOT_PASSWORD_FILE")" = 600 ] || fail "the root password file is not 0600"

# attacker ARGS...: etcdctl with nothing from env.sh or the environment, short timeouts; its output
# (stdout and stderr) is printed, its status returned.
attacker() {
  env -i PATH="$PATH" HOME="$OUT" ETCDCTL_API=3 timeout 30 etcdctl --dial-timeout 1s --command-timeout 2s "$@" 2>&1
}
# refused WHAT ARGS...: the attacker's read of /mlsched/specs/ and its write of a key must both
# fail, the read must not show the secret, and the key must not exist afterwards.
refused() {
  local what=$1 out key="/mlsched/attack-$RANDOM"; shift
  if out=$(attacker "$@" get /mlsched/specs/ --prefix); then fail "$what: read /mlsched/specs/: $out"; fi
  grep -aqF "$SECRET" <<<"$out" && fail "$what: the read printed the secret"
  if out=$(attacker "$@" put "$key" pwned); then fail "$what: wrote $key: $out"; fi
  [ -z "$(etcd_ctl get "$key" --print-value-only)" ] || fail "$what: $key exists"
  say "$what: refused ($(tail -n 1 <<<"$out" | cut -c1-100))"
}
# peer URL CURL_ARGS...: the HTTP status a peer port answers /members with (000: no answer).
peer() {
  local url=$1; shift
  curl -s --http1.1 --max-time 5 -o /dev/null -w '%{http_code}' "$@" "$url/members" 2>/dev/null || true
}

# The user: nobody when the test runs as root (setpriv), else whoever runs it. Its jobs write into
# $JOBS (mode 1777).
as_user() {
  if [ "$(id -u)" = 0 ]; then setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; else "$@"; fi
}
if [ "$(id -u)" = 0 ]; then USER_NAME=nobody; else USER_NAME=$(id -un); fi
JOBS="$OUT/jobs"
mkdir -p "$JOBS" && chmod 1777 "$JOBS"
submit() { as_user "$BIN/cli/mlsub" --parsable -D "$JOBS" -n 1 -c 1 -o /dev/null "$@"; }

# The user's secret, in a held job's spec.
SECRET="s3cr3t-$RANDOM$RANDOM$RANDOM"
held=$(submit -H -J secret --export "ALL,DB_PASSWORD=$SECRET" --wrap true) || fail "$USER_NAME cannot submit"
specs=$(etcd_ctl get /mlsched/specs/ --prefix) || fail "schedd's certificate cannot read /mlsched/specs/"
grep -aqF "$SECRET" <<<"$specs" || fail "positive control: the secret of job $held is not in etcd's specs"
etcd_ctl put /mlsched/attack-control ok >/dev/null || fail "positive control: schedd's certificate cannot write"
etcd_ctl del /mlsched/attack-control >/dev/null
say "positive control: with schedd's etcd client certificate the secret of job $held reads back from /mlsched/specs/"

# (a) no client certificate: with etcd's CA (a client that checks the server), and without it.
refused "(a) no client certificate" --endpoints "$EP1" --cacert "$TLS/etcd/ca.pem"
refused "(a) no client certificate, server not checked" --endpoints "$EP1" --insecure-transport=false --insecure-skip-tls-verify
# (b) a compromised node's certificate (cluster CA), presented as is.
refused "(b) node certificate od-1 (cluster CA)" --endpoints "$EP1" --insecure-transport=false --insecure-skip-tls-verify \
  --cert "$TLS/nodes/od-1.pem" --key "$TLS/nodes/od-1.key"
refused "(b) schedd's server certificate (cluster CA)" --endpoints "$EP1" --insecure-transport=false --insecure-skip-tls-verify \
  --cert "$TLS/schedd.pem" --key "$TLS/schedd.key"
# (c) a CA of the attacker's own, with a client certificate named as the replicas' etcd user.
bash "$ROOT/scripts/mlsched-certs.sh" "$OUT/evil" etcd-ca >/dev/null
bash "$ROOT/scripts/mlsched-certs.sh" "$OUT/evil" etcd-client mlsched-schedd >/dev/null
bash "$ROOT/scripts/mlsched-certs.sh" "$OUT/evil" etcd-member etcd-1 127.0.0.1 >/dev/null
refused "(c) client certificate of another CA, CN=mlsched-schedd" --endpoints "$EP1" --insecure-transport=false \
  --insecure-skip-tls-verify --cert "$OUT/evil/etcd/clients/mlsched-schedd.pem" --key "$OUT/evil/etcd/clients/mlsched-schedd.key"
# (d) plaintext.
refused "(d) plaintext http:// to the client port" --endpoints "http://$EP1"
range="{\"key\": \"$(printf /mlsched/specs/ | base64)\", \"range_end\": \"$(printf /mlsched/specs0 | base64)\"}"
gateway() {  # URL CURL_ARGS...: the HTTP status of a range read of /mlsched/specs/ through etcd's JSON gateway
  local url=$1; shift
  : > "$OUT/gateway.out"
  curl -s --max-time 5 -o "$OUT/gateway.out" -w '%{http_code}' "$@" -X POST "$url/v3/kv/range" -d "$range" 2>/dev/null || true
}
# Positive control: with schedd's certificate the gateway answers HTTP (with RBAC on it refuses to
# act on a certificate's CN, so it answers 400, not the keys).
gw_code=$(gateway "https://$EP1" --cacert "$TLS/etcd/ca.pem" --cert "$MLSCHED_ETCD_CERT" --key "$MLSCHED_ETCD_KEY")
[ "$gw_code" != 000 ] || fail "positive control: etcd's JSON gateway does not answer schedd's certificate"
grep -aq kvs "$OUT/gateway.out" && fail "etcd's JSON gateway returned keys for a certificate's CN despite RBAC"
for how in "plaintext:http" "https without a client certificate:https"; do
  code=$(gateway "${how##*:}://$EP1" -k)
  [ "$code" != 200 ] || fail "(d) etcd's JSON gateway answered ${how%%:*} with HTTP 200"
  grep -aq kvs "$OUT/gateway.out" && fail "(d) etcd's JSON gateway returned keys over ${how%%:*}"
done
say "(d) etcd's JSON gateway: no keys over http:// nor over https:// without a client certificate (with schedd's: HTTP $gw_code, RBAC)"

# (e) the peer port: only members.
[ "$(peer "https://$PEER" --cacert "$TLS/etcd/ca.pem" --cert "$TLS/etcd/etcd-2.pem" --key "$TLS/etcd/etcd-2.key")" = 200 ] ||
  fail "positive control: the peer port refuses member etcd-2's certificate"
for who in "no certificate::" "node od-1 (cluster CA):$TLS/nodes/od-1.pem:$TLS/nodes/od-1.key" \
           "schedd's etcd client certificate (etcd CA, not a member):$MLSCHED_ETCD_CERT:$MLSCHED_ETCD_KEY" \
           "a member certificate of another CA:$OUT/evil/etcd/etcd-1.pem:$OUT/evil/etcd/etcd-1.key"; do
  IFS=: read -r name cert key <<<"$who"
  args=(-k)
  [ -n "$cert" ] && args+=(--cert "$cert" --key "$key")
  code=$(peer "https://$PEER" "${args[@]}")
  [ "$code" = 000 ] || fail "(e) the peer port answered $name with HTTP $code"
done
code=$(peer "http://$PEER")
[ "$code" = 000 ] || fail "(e) the peer port answered plaintext with HTTP $code"
say "(e) peer port: a member's certificate is answered; none, a node's, schedd's client certificate, another CA's and plaintext are not"

# (f) a replica on plaintext etcd.
rogue_schedd() {  # PORT MORE_FLAGS...: a fourth replica on this cluster's etcd, as the attacker would start it
  local port=$1; shift
  timeout 60 "$BIN/schedd/server/schedd" --listen "unix:$OUT/rogue-$port.sock" --listen-tcp "127.0.0.1:$port" \
    --tls-cert "$TLS/schedd.pem" --tls-key "$TLS/schedd.key" --tls-ca "$TLS/ca.pem" --munge-socket "$MLSCHED_MUNGE_SOCKET" \
    --state-dir "$OUT/rogue-db-$port" --policy "$ROOT/policies/default.toml" --ha "etcd://$MLSCHED_ETCD" "$@"
}
rc=0; out=$(rogue_schedd $((BASE + 30)) 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "(f) schedd --ha on plaintext etcd without --ha-insecure exited $rc: $out"
grep -q -- '--ha-insecure' <<<"$out" || fail "(f) schedd's refusal does not name --ha-insecure: $out"
say "(f) schedd --ha etcd://... without TLS: exit 2: $(head -c 100 <<<"$out")..."
rc=0; out=$(rogue_schedd $((BASE + 31)) --etcd-tls-ca "$TLS/etcd/ca.pem" 2>&1) || rc=$?
[ "$rc" = 2 ] || fail "(f) schedd --etcd-tls-ca without a client certificate or login exited $rc: $out"
say "(f) schedd --etcd-tls-ca without a client certificate or login: exit 2"
rogue_schedd $((BASE + 32)) --ha-insecure > "$MLSCHED_STATE/logs/rogue.log" 2>&1 &
rogue=$!
sleep 6
members=$(etcd_ctl get /mlsched/members/ --prefix --keys-only) || fail "cannot read /mlsched/members/"
grep -aq "127.0.0.1:$((BASE + 32))" <<<"$members" && fail "(f) a replica on plaintext etcd registered as a member"
kill "$rogue" 2>/dev/null || true
wait "$rogue" 2>/dev/null || true
rogue=""
say "(f) a replica started with --ha-insecure against the TLS members never joined (not in /mlsched/members/)"

# (g) schedd's own certificate, stolen. RBAC first: only /mlsched/.
for cmd in "get / --prefix" "put /elsewhere x" "user add evil --no-password" "role grant-permission mlsched readwrite / --prefix" \
           "user grant-role mlsched-schedd root" "auth disable"; do
  # shellcheck disable=SC2086
  if out=$(etcd_ctl $cmd 2>&1); then fail "(g) RBAC let schedd's certificate run 'etcdctl $cmd': $out"; fi
  grep -qi 'permission denied' <<<"$out" || fail "(g) 'etcdctl $cmd' failed for another reason than RBAC: $out"
done
# etcd's root: the password from its 0600 file, passed in etcdctl's environment (not its argv).
etcd_root() { ETCDCTL_USER="root:$(cat "$MLSCHED_ETCD_ROOT_PASSWORD_FILE")" ETCDCTL_API=3 etcdctl --endpoints "$MLSCHED_ETCD" \
  --cacert "$MLSCHED_ETCD_CACERT" --cert "$MLSCHED_ETCD_CERT" --key "$MLSCHED_ETCD_KEY" "$@"; }
users=$(etcd_root user list) || fail "positive control: etcd's root cannot list users"
grep -qx mlsched-schedd <<<"$users" || fail "etcd has no user mlsched-schedd: $users"
say "(g) RBAC: schedd's certificate reads and writes /mlsched/ only; no user, role or auth change (root lists: $(tr '\n' ' ' <<<"$users"))"

# Forged job rows: two held jobs of the user whose script would leave a mark, rewritten through
# etcd as released, uid 0 and (1) the user's own name (whose uid is not 0), (2) a user that does
# not exist.
key_of() { printf '/mlsched/%s/%020d' "$1" "$2"; }
value_of() { etcd_ctl get "$1" -w json | jq -r '.kvs[0].value // empty' | base64 -d; }
proto() { protoc -I "$ROOT/proto" "$@" mlsched/v1/stored.proto mlsched/v1/types.proto; }
forge() {  # JOB USER: rewrites the job's row (uid 0, USER, released) and its spec (not held)
  local job=$1 user=$2 row spec
  row=$(value_of "$(key_of jobs "$job")" | proto --decode=mlsched.v1.StoredJob) || fail "cannot decode job $job's row"
  spec=$(value_of "$(key_of specs "$job")" | proto --decode=mlsched.v1.JobSpec) || fail "cannot decode job $job's spec"
  grep -q '^hold: true' <<<"$spec" || fail "job $job's stored spec is not held: $spec"
  sed -e '/^uid:/d' -e '/^user:/d' -e '/^reason:/d' <<<"$row" | { cat; echo 'uid: 0'; echo "user: \"$user\""; echo 'reason: "None"'; } |
    proto --encode=mlsched.v1.StoredJob > "$OUT/row.$job" || fail "cannot encode job $job's forged row"
  sed '/^hold:/d' <<<"$spec" | proto --encode=mlsched.v1.JobSpec > "$OUT/spec.$job" || fail "cannot encode job $job's forged spec"
  etcd_ctl put "$(key_of specs "$job")" < "$OUT/spec.$job" >/dev/null || fail "the stolen certificate cannot write job $job's spec"
  etcd_ctl put "$(key_of jobs "$job")" < "$OUT/row.$job" >/dev/null || fail "the stolen certificate cannot write job $job's row"
  value_of "$(key_of jobs "$job")" | proto --decode=mlsched.v1.StoredJob | qgrep '^user: "'"$user"'"' ||
    fail "job $job's forged row did not read back"
}
mark='id -u > "forged.$MLSCHED_JOB_ID"'
f1=$(submit -H -J forged-1 --wrap "$mark")
f2=$(submit -H -J forged-2 --wrap "$mark")
forge "$f1" "$USER_NAME"
forge "$f2" mlsched-no-such-user
say "(g) job $f1's row now says uid 0 user $USER_NAME, job $f2's uid 0 user mlsched-no-such-user, both released"
# Force a takeover: the new leader loads every row from etcd.
status=$("$BIN/cli/mladmin" ha status --json) || fail "mladmin ha status"
leader=$(jq -r .leader <<<"$status") epoch=$(jq -r .epoch <<<"$status")
replica=$(( ${leader##*:} - BASE - 19 ))
kill -9 "$(cat "$MLSCHED_STATE/pids/schedd-$replica.child")"
# new_leader OLD_EPOCH SECONDS: waits until a leader of a newer epoch answers; prints the seconds.
new_leader() {
  local t0 j e l
  t0=$(date +%s.%N)
  while awk -v a="$(date +%s.%N)" -v b="$t0" -v s="$2" 'BEGIN { exit !(a - b < s) }'; do
    j=$("$BIN/cli/mladmin" ha status --json 2>/dev/null || true)
    e=$(jq -r '.epoch // 0' <<<"$j" 2>/dev/null || true) l=$(jq -r '.leader // ""' <<<"$j" 2>/dev/null || true)
    if [[ $e =~ ^[0-9]+$ ]] && [ "$e" -gt "$1" ] && [ -n "$l" ] && "$BIN/cli/mlq" --server "$l" -h -o %i >/dev/null 2>&1; then
      awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f\n", a - b }'
      return 0
    fi
    sleep 0.1
  done
  return 1
}
took=$(new_leader "$epoch" 30) || fail "no new leader within 30 s of killing $leader"
say "(g) leader $leader killed: a new leader serves after $took s"
control=$(submit -J control --wrap 'id -u > "control.$MLSCHED_JOB_ID"')
wait_for "$control" COMPLETED 90
[ -s "$JOBS/control.$control" ] || fail "positive control: job $control completed without running"
sleep 3  # a few more scheduling cycles
states=""
for j in "$f1" "$f2"; do
  [ -e "$JOBS/forged.$j" ] && fail "(g) forged job $j ran as uid $(cat "$JOBS/forged.$j")"
  state=$("$BIN/cli/mlq" -j "$j" -h -o '%T %r' 2>/dev/null || true)
  case "${state%% *}" in RUNNING|COMPLETING|COMPLETED) fail "(g) forged job $j is $state" ;; esac
  # The leader that loaded the row says it refused it (quarantine: logged, never run).
  grep -aqiE "job $j\b.*(quarantin|refused|rejected)" "$MLSCHED_STATE"/logs/schedd-*.log ||
    fail "(g) no replica logged forged job $j's row as refused (mlq: $state)"
  states+=" $j: $state;"
done
say "(g) forged jobs never ran, their rows refused ($states); job $control, submitted after the takeover, ran"

# A leader key written without a lease (the current one deleted first), then one with a lease but
# a value no replica wrote: each stops the cluster for less than 10 s.
for kind in "a lease-less" "an unparsable"; do
  epoch=$("$BIN/cli/mladmin" ha status --json | jq -r .epoch)
  if [ "$kind" = "a lease-less" ]; then
    etcd_ctl del /mlsched/leader >/dev/null && etcd_ctl put /mlsched/leader x >/dev/null || fail "cannot write the leader key"
  else
    lease=$(etcd_ctl lease grant 60 | grep -o 'lease [0-9a-f]*' | cut -d' ' -f2)
    etcd_ctl del /mlsched/leader >/dev/null && etcd_ctl put --lease="$lease" /mlsched/leader $'\x01\xffgarbage' >/dev/null ||
      fail "cannot write the leader key"
  fi
  took=$(new_leader "$epoch" 10) || fail "($kind leader key) no leader served within 10 s"
  # The new leader's own key (with its lease) may land a moment after it serves: wait up to 10 s.
  for _ in $(seq 1 100); do
    lease=$(etcd_ctl get /mlsched/leader -w json | jq -r '.kvs[0].lease // 0')
    [ "$lease" != 0 ] && break
    sleep 0.1
  done
  [ "$lease" != 0 ] || fail "($kind leader key) the leader key has no lease 10 s after the takeover"
  say "(g) $kind leader key: a new leader serves after $took s"
done
"$BIN/cli/mlcancel" "$held" "$f1" "$f2" >/dev/null 2>&1 || true
say "passed: no client certificate, a node's, another CA's, plaintext and non-members on the peer port refused; no plaintext replica; the stolen certificate is confined to /mlsched/ and its forged rows and leader keys do no harm"
