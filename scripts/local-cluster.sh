#!/usr/bin/env bash
# A local mlsched cluster on loopback: one schedd (SQLite state, policies/default.toml, Prometheus
# metrics), four agents (2 on-demand, 2 spot, in two topology domains) and an object store for
# checkpoints (s3rver from tools/s3 when node and its modules are there, else a directory through
# file://), all in one state directory. Secured as a production cluster is: a private cluster CA
# and certificates (scripts/mlsched-certs.sh), schedd on TLS (127.0.0.1, a free port), agents on
# mutual TLS with their node certificates (schedd refuses those tls/crl.pem revokes:
# `scripts/mlsched-certs.sh $STATE/tls revoke NODE`), and a private munged (own key and socket)
# through which the CLI proves who the user is. schedd's Unix socket stays for local callers
# (SO_PEERCRED).
#   scripts/local-cluster.sh up [--ha]|down|status
# `up --ha` runs the HA variant instead of the single SQLite schedd: three etcd members and three
# schedd replicas (--ha etcd://...), each on a fixed loopback port from $MLSCHED_HA_BASE_PORT
# (default 32379: etcd clients +0..2, etcd peers +10..12, schedd +20..22), each under a restart
# loop as systemd's Restart=always would run it (a deposed leader exits 3 and comes back as a
# follower); agents and the CLI get the list of the three replicas and follow the leader.
# etcd is secured as docs/operations.md ("Securing etcd") says: its own CA (tls/etcd/, not the
# cluster CA), client and peer mutual TLS (--client-cert-auth, --peer-client-cert-auth; members
# accept only member certificates as peers), and RBAC: a root user whose random password is in
# tls/etcd/root.password (0600) and a role with readwrite on /mlsched/ only, granted to the user
# mlsched-schedd that the replicas' client certificate names (CN).
# `up` writes $MLSCHED_STATE/env.sh: source it to get MLSCHED_SERVER, the checkpoint URL and the
# S3 credentials (MLSCHED_CHECKPOINT_URL, AWS_*), the metrics address (MLSCHED_METRICS_URL), the CA
# (MLSCHED_TLS_CA) and the munged socket (MLSCHED_MUNGE_SOCKET); with --ha also etcd's endpoints
# (MLSCHED_ETCD, HOST:PORT,...), its CA and schedd's etcd client certificate (MLSCHED_ETCD_CACERT,
# MLSCHED_ETCD_CERT, MLSCHED_ETCD_KEY: etcdctl's --cacert, --cert, --key) and the root password's
# file (MLSCHED_ETCD_ROOT_PASSWORD_FILE; never the password itself).
# Environment: MLSCHED_STATE (default ./.state), MLSCHED_BUILD_DIR (default ./build),
# AGENT_CPUS (CPUs per agent, default 2), MLSCHED_AGENT_ARGS (more agentd flags, word-split; %n
# becomes the node's name, as in Slurm's file names), MLSCHED_POLICY (default policies/default.toml),
# MLSCHED_SCHEDD_ARGS (more flags of the single schedd, word-split),
# MLSCHED_OBJECT_STORE (s3 | dir; default s3 when available), MLSCHED_HA_SCHEDD_ARGS (more schedd
# flags for the HA replicas, word-split), MLSCHED_ETCD_TLS (1, the default; 0: plaintext etcd and
# schedd --ha-insecure, on a fresh state directory, for measuring what TLS costs only),
# MLSCHED_ETCD_RBAC (1, the default; 0: client certificates alone).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="${MLSCHED_STATE:-$PWD/.state}"
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
SOCK="$STATE/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
AGENT_CPUS="${AGENT_CPUS:-2}"
# schedd passes both to the provisioning programs it runs (scripts/local-provision.sh).
export MLSCHED_STATE="$STATE" MLSCHED_BUILD_DIR="$BIN"
POLICY="${MLSCHED_POLICY:-$PWD/policies/default.toml}"

start() {  # name, log, command...
  local name=$1 log=$2; shift 2
  setsid "$@" >>"$log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
}

up() {
  mkdir -p "$STATE/pids" "$STATE/logs"
  if [ -f "$STATE/pids/schedd" ] && kill -0 "$(cat "$STATE/pids/schedd")" 2>/dev/null ||
     { [ -f "$STATE/pids/schedd-1" ] && kill -0 "$(cat "$STATE/pids/schedd-1")" 2>/dev/null; }; then
    echo "local cluster already up (MLSCHED_SERVER=$MLSCHED_SERVER)"; return 0
  fi
  : > "$STATE/env.sh"
  rm -f "$STATE/stopping"
  certificates
  munge_up
  object_store
  if [ "$HA" = 1 ]; then ha_up; else single_up; fi
  agents_up
}

single_up() {
  start schedd "$STATE/logs/schedd.log" "$BIN/schedd/server/schedd" --listen "unix:$SOCK" \
    --listen-tcp 127.0.0.1:0 --tls-cert "$STATE/tls/schedd.pem" --tls-key "$STATE/tls/schedd.key" \
    --tls-ca "$STATE/tls/ca.pem" --tls-crl "$STATE/tls/crl.pem" --munge-socket "$STATE/munge/munge.sock" \
    --state-dir "$STATE/db" --policy "$POLICY" --metrics-port 0 \
    --heartbeat-interval 1 --heartbeat-timeout 6 --kill-grace 20 ${MLSCHED_SCHEDD_ARGS:-}
  for i in $(seq 1 50); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.2; done
  "$BIN/cli/mlq" >/dev/null || { echo "schedd did not start; see $STATE/logs/schedd.log" >&2; tail -5 "$STATE/logs/schedd.log" >&2; exit 1; }
  local url tls
  url=$(grep -o 'metrics on http://[^ ]*' "$STATE/logs/schedd.log" | tail -1 | cut -d' ' -f3)
  tls=$(grep -o 'and tls:[0-9.]*:[0-9]*' "$STATE/logs/schedd.log" | tail -1 | cut -d: -f2-)
  [ -n "$tls" ] || { echo "schedd did not report its TLS port; see $STATE/logs/schedd.log" >&2; exit 1; }
  export MLSCHED_SERVER="$tls" MLSCHED_TLS_CA="$STATE/tls/ca.pem" MLSCHED_MUNGE_SOCKET="$STATE/munge/munge.sock"
  cat >> "$STATE/env.sh" <<ENV
export MLSCHED_SERVER=$MLSCHED_SERVER
export MLSCHED_TLS_CA=$MLSCHED_TLS_CA
export MLSCHED_MUNGE_SOCKET=$MLSCHED_MUNGE_SOCKET
export MLSCHED_METRICS_URL=$url
ENV
  "$BIN/cli/mlq" >/dev/null || { echo "schedd refuses TLS+MUNGE calls; see $STATE/logs/schedd.log" >&2; exit 1; }
}

# Three etcd members and three schedd replicas (see the header); MLSCHED_SERVER lists the replicas.
ha_up() {
  command -v etcd >/dev/null && command -v etcdctl >/dev/null || { echo "etcd is missing: run scripts/install-deps.sh" >&2; exit 1; }
  local base="${MLSCHED_HA_BASE_PORT:-32379}" cluster="" endpoints="" servers="" i scheme=https
  local etc="$STATE/tls/etcd" member_tls etcd_flags
  [ "$ETCD_TLS" = 1 ] || scheme=http
  for i in 1 2 3; do cluster="${cluster:+$cluster,}etcd-$i=$scheme://127.0.0.1:$((base + 9 + i))"; done
  for i in 1 2 3; do
    endpoints="${endpoints:+$endpoints,}127.0.0.1:$((base + i - 1))"
    servers="${servers:+$servers,}127.0.0.1:$((base + 19 + i))"
    mkdir -p "$STATE/etcd-$i"
    member_tls=()
    [ "$ETCD_TLS" = 1 ] && member_tls=(
      --client-cert-auth --trusted-ca-file "$etc/ca.pem" --cert-file "$etc/etcd-$i.pem" --key-file "$etc/etcd-$i.key"
      --peer-client-cert-auth --peer-trusted-ca-file "$etc/ca.pem" --peer-cert-file "$etc/etcd-$i.pem"
      --peer-key-file "$etc/etcd-$i.key" --peer-cert-allowed-hostname member.etcd.mlsched)
    start "etcd-$i" "$STATE/logs/etcd-$i.log" etcd --name "etcd-$i" --data-dir "$STATE/etcd-$i" \
      --listen-client-urls "$scheme://127.0.0.1:$((base + i - 1))" --advertise-client-urls "$scheme://127.0.0.1:$((base + i - 1))" \
      --listen-peer-urls "$scheme://127.0.0.1:$((base + 9 + i))" --initial-advertise-peer-urls "$scheme://127.0.0.1:$((base + 9 + i))" \
      --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token mlsched-local \
      --auto-compaction-mode periodic --auto-compaction-retention 10m "${member_tls[@]}"
  done
  etcd_ready "$endpoints"
  if [ "$ETCD_TLS" = 1 ]; then
    [ "$ETCD_RBAC" = 1 ] && etcd_rbac "$endpoints"
    etcd_flags=(--etcd-tls-ca "$etc/ca.pem" --etcd-tls-cert "$etc/clients/mlsched-schedd.pem" --etcd-tls-key "$etc/clients/mlsched-schedd.key")
  else
    etcd_flags=(--ha-insecure)
  fi
  for i in 1 2 3; do
    # A replica that loses the leadership exits 3 and is restarted as a follower; one killed or
    # stopped is restarted too (systemd's Restart=always); `down` stops the loop first.
    start "schedd-$i" "$STATE/logs/schedd-$i.log" bash -c '
      while :; do
        "$@" & child=$!; echo $child > "'"$STATE"'/pids/schedd-'"$i"'.child"
        trap "kill -TERM $child 2>/dev/null" TERM
        wait $child; rc=$?; wait $child 2>/dev/null; r2=$?; [ $rc -gt 128 ] && [ $r2 -lt 128 ] && rc=$r2
        [ -e "'"$STATE"'/stopping" ] && exit $rc
        echo "[local-cluster] schedd exited with status $rc; restarting in 1 s"; sleep 1
      done' schedd-loop "$BIN/schedd/server/schedd" --listen "unix:$STATE/schedd-$i.sock" \
      --listen-tcp "127.0.0.1:$((base + 19 + i))" --tls-cert "$STATE/tls/schedd.pem" --tls-key "$STATE/tls/schedd.key" \
      --tls-ca "$STATE/tls/ca.pem" --tls-crl "$STATE/tls/crl.pem" --munge-socket "$STATE/munge/munge.sock" --state-dir "$STATE/db-$i" \
      --ha "etcd://$endpoints" "${etcd_flags[@]}" --policy "$POLICY" --heartbeat-interval 1 --heartbeat-timeout 6 \
      --kill-grace 20 ${MLSCHED_HA_SCHEDD_ARGS:-}
  done
  export MLSCHED_SERVER="$servers" MLSCHED_TLS_CA="$STATE/tls/ca.pem" MLSCHED_MUNGE_SOCKET="$STATE/munge/munge.sock"
  AGENT_EXTRA=(--cutoff-timeout 20)
  for i in $(seq 1 100); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.2; done
  "$BIN/cli/mlq" >/dev/null || { echo "no schedd replica leads; see $STATE/logs/schedd-*.log" >&2; exit 1; }
  cat >> "$STATE/env.sh" <<ENV
export MLSCHED_SERVER=$MLSCHED_SERVER
export MLSCHED_TLS_CA=$MLSCHED_TLS_CA
export MLSCHED_MUNGE_SOCKET=$MLSCHED_MUNGE_SOCKET
export MLSCHED_ETCD=$endpoints
ENV
  if [ "$ETCD_TLS" = 1 ]; then
    cat >> "$STATE/env.sh" <<ENV
export MLSCHED_ETCD_CACERT=$etc/ca.pem
export MLSCHED_ETCD_CERT=$etc/clients/mlsched-schedd.pem
export MLSCHED_ETCD_KEY=$etc/clients/mlsched-schedd.key
ENV
    [ "$ETCD_RBAC" = 1 ] && echo "export MLSCHED_ETCD_ROOT_PASSWORD_FILE=$etc/root.password" >> "$STATE/env.sh"
  fi
  return 0
}

# etcdctl as schedd (its client certificate) on ENDPOINTS; more arguments follow.
etcd_ctl() {
  local endpoints=$1; shift
  if [ "$ETCD_TLS" = 1 ]; then
    ETCDCTL_API=3 etcdctl --endpoints "$endpoints" --dial-timeout 2s --command-timeout 5s --cacert "$STATE/tls/etcd/ca.pem" \
      --cert "$STATE/tls/etcd/clients/mlsched-schedd.pem" --key "$STATE/tls/etcd/clients/mlsched-schedd.key" "$@"
  else
    ETCDCTL_API=3 etcdctl --endpoints "$endpoints" --dial-timeout 2s --command-timeout 5s "$@"
  fi
}

# Waits up to 30 s until every member answers (a quorum commits through each).
etcd_ready() {
  for _ in $(seq 1 60); do etcd_ctl "$1" endpoint health >/dev/null 2>&1 && return 0; sleep 0.5; done
  etcd_ctl "$1" endpoint health >&2 || true
  echo "etcd did not start; see $STATE/logs/etcd-*.log" >&2
  exit 1
}

# etcd RBAC, once per etcd data directory: root (random password, 0600 file; etcdctl reads it from
# stdin, never from its command line), a role with readwrite on /mlsched/ only, granted to the user
# that schedd's client certificate names (etcd takes the CN as the user), then auth enabled.
etcd_rbac() {
  local endpoints=$1 etc="$STATE/tls/etcd" done="$STATE/etcd-1/mlsched-rbac"
  [ -f "$done" ] && return 0
  [ -s "$etc/root.password" ] || (umask 077; { head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9'; echo; } > "$etc/root.password")
  {
    etcd_ctl "$endpoints" user add root --interactive=false < "$etc/root.password"
    etcd_ctl "$endpoints" role add mlsched
    etcd_ctl "$endpoints" role grant-permission mlsched readwrite /mlsched/ --prefix
    etcd_ctl "$endpoints" user add mlsched-schedd --no-password
    etcd_ctl "$endpoints" user grant-role mlsched-schedd mlsched
    etcd_ctl "$endpoints" auth enable
  } >> "$STATE/logs/etcd-rbac.log" 2>&1 || { echo "etcd RBAC setup failed; see $STATE/logs/etcd-rbac.log" >&2; exit 1; }
  touch "$done"
}

agents_up() {
  local n=0 names=() skip=() root_jobs=() agent_args=${MLSCHED_AGENT_ARGS:-}
  # Agents refuse root's jobs by default (Slurm's DisableRootJobs); this cluster runs everything,
  # the demo's and CI's jobs included, as whoever started it.
  if [ "$(id -u)" = 0 ]; then
    root_jobs=(--allow-root-jobs)
    echo "agents run jobs of root (--allow-root-jobs): this local cluster runs as root"
  fi
  for spec in "od-1 on-demand rack-a" "od-2 on-demand rack-b" "spot-1 spot rack-a" "spot-2 spot rack-b"; do
    set -- $spec
    mkdir -p "$STATE/agents/$1"
    names+=("$1")
    skip+=("$(if [ -f "$STATE/logs/agent-$1.log" ]; then wc -l < "$STATE/logs/agent-$1.log"; else echo 0; fi)")  # earlier runs
    start "agent-$1" "$STATE/logs/agent-$1.log" "$BIN/agentd/agentd" --server "$MLSCHED_SERVER" --name "$1" \
      --tls-cert "$STATE/tls/nodes/$1.pem" --tls-key "$STATE/tls/nodes/$1.key" --tls-ca "$STATE/tls/ca.pem" \
      --pool "$2" --domain "$3" --zone local-a --region local --cpus "$AGENT_CPUS" --mem 4G \
      --work-dir "$STATE/agents/$1" --address 127.0.0.1 --metrics-port 0 "${root_jobs[@]}" "${AGENT_EXTRA[@]}" ${agent_args//%n/$1}
    n=$((n + 1))
  done
  # Up to 30 s: on a loaded machine (CI runs tests two at a time) agents can take over 10 s to
  # register, and a job submitted before they have (an elastic one) would start smaller. Each
  # agent's own log says when it registered; `mladmin nodes` would also list the nodes an earlier
  # run of this state directory registered, before these agents have.
  local i k registered
  for i in $(seq 1 150); do
    registered=0
    for k in "${!names[@]}"; do
      awk -v s="${skip[k]}" 'NR > s && /registered with schedd/ {f = 1} END {exit !f}' \
        "$STATE/logs/agent-${names[k]}.log" 2>/dev/null && registered=$((registered + 1))
    done
    [ "$registered" -ge "$n" ] && break
    sleep 0.2
  done
  [ "$registered" -ge "$n" ] || echo "warning: $registered of $n agents registered within 30 s; see $STATE/logs/agent-*.log" >&2
  echo "local cluster up (TLS + MUNGE${HA:+, HA on etcd}): source $STATE/env.sh (MLSCHED_SERVER=$MLSCHED_SERVER)"
}

# The cluster CA, schedd's certificate, one certificate per node and the CRL; with --ha etcd's own
# CA, a certificate per member and schedd's etcd client certificate (all kept across restarts).
certificates() {
  if [ ! -f "$STATE/tls/ca.pem" ]; then
    bash scripts/mlsched-certs.sh "$STATE/tls" ca >/dev/null
    bash scripts/mlsched-certs.sh "$STATE/tls" schedd localhost >/dev/null
    for n in od-1 od-2 spot-1 spot-2; do bash scripts/mlsched-certs.sh "$STATE/tls" node "$n" >/dev/null; done
    chmod 0755 "$STATE/tls"  # ca.pem readable by every local user; keys stay 0600
  fi
  # The CRL schedd checks node certificates against (--tls-crl), renewed at every start (valid 90
  # days); `scripts/mlsched-certs.sh $STATE/tls revoke NODE` adds a node and schedd re-reads it.
  bash scripts/mlsched-certs.sh "$STATE/tls" crl >/dev/null
  if [ "$HA" = 1 ] && [ "$ETCD_TLS" = 1 ] && [ ! -f "$STATE/tls/etcd/clients/mlsched-schedd.pem" ]; then
    rm -rf "$STATE/tls/etcd"  # an interrupted earlier run: start over
    bash scripts/mlsched-certs.sh "$STATE/tls" etcd-ca >/dev/null  # tls/etcd/ is 0700
    for i in 1 2 3; do bash scripts/mlsched-certs.sh "$STATE/tls" etcd-member "etcd-$i" 127.0.0.1 >/dev/null; done
    bash scripts/mlsched-certs.sh "$STATE/tls" etcd-client mlsched-schedd >/dev/null
  fi
}

# A private munged: its own key and socket (the directory is traversable, not listable, by others).
munge_up() {
  command -v munged >/dev/null || { echo "munged is missing: run scripts/install-deps.sh" >&2; exit 1; }
  mkdir -p "$STATE/munge"
  chmod 0711 "$STATE/munge"
  [ -f "$STATE/munge/munge.key" ] || mungekey --create --keyfile="$STATE/munge/munge.key"
  munged --force --socket="$STATE/munge/munge.sock" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/logs/munged.log" --seed-file="$STATE/munge/munged.seed"
  for i in $(seq 1 50); do [ -S "$STATE/munge/munge.sock" ] && [ -s "$STATE/munge/munged.pid" ] && break; sleep 0.1; done
  cp "$STATE/munge/munged.pid" "$STATE/pids/munged"
}

# Starts the checkpoint object store and records its URL and credentials in env.sh.
object_store() {
  local mode="${MLSCHED_OBJECT_STORE:-s3}"
  if [ "$mode" = s3 ] && command -v node >/dev/null && [ -d tools/s3/node_modules/s3rver ]; then
    mkdir -p "$STATE/s3"
    local port="" skip=0  # the log's lines from earlier runs, whose READY names a port long closed
    [ -f "$STATE/logs/s3.log" ] && skip=$(wc -l < "$STATE/logs/s3.log")
    start s3 "$STATE/logs/s3.log" node tools/s3/s3-test-server.js "$STATE/s3" checkpoints S3RVER S3RVER us-east-1
    for i in $(seq 1 100); do
      port=$(tail -n +"$((skip + 1))" "$STATE/logs/s3.log" 2>/dev/null | grep -o '^READY [0-9]*' | head -n 1 | cut -d' ' -f2 || true)
      [ -n "$port" ] && break; sleep 0.1
    done
    [ -n "$port" ] || { echo "object store did not start; see $STATE/logs/s3.log" >&2; exit 1; }
    cat >> "$STATE/env.sh" <<ENV
export MLSCHED_CHECKPOINT_URL=s3://checkpoints
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=S3RVER
export AWS_SECRET_ACCESS_KEY=S3RVER
ENV
    echo "object store: s3rver on 127.0.0.1:$port, bucket 'checkpoints'"
  else
    mkdir -p "$STATE/objects"
    echo "export MLSCHED_CHECKPOINT_URL=file://$STATE/objects" >> "$STATE/env.sh"
    echo "object store: directory $STATE/objects (file://)"
  fi
}

down() {
  [ -d "$STATE/pids" ] || { echo "local cluster is not running"; return 0; }
  touch "$STATE/stopping"
  for f in "$STATE"/pids/agent-* "$STATE/pids/schedd" "$STATE"/pids/schedd-? "$STATE"/pids/schedd-?.child \
           "$STATE"/pids/etcd-? "$STATE/pids/s3" "$STATE/pids/munged"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  echo "local cluster down"
}

status() {
  for f in "$STATE"/pids/*; do
    [ -f "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$(basename "$f"): running (pid $(cat "$f"))";
    else echo "$(basename "$f"): dead"; fi
  done
  "$BIN/cli/mladmin" nodes 2>/dev/null || true
}

HA=""
AGENT_EXTRA=()
ETCD_TLS=${MLSCHED_ETCD_TLS:-1} ETCD_RBAC=${MLSCHED_ETCD_RBAC:-1}
[[ $ETCD_TLS =~ ^[01]$ && $ETCD_RBAC =~ ^[01]$ ]] || { echo "MLSCHED_ETCD_TLS and MLSCHED_ETCD_RBAC are 0 or 1" >&2; exit 2; }
[ "${2:-}" = "--ha" ] && HA=1
case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up [--ha]|down|status" >&2; exit 2 ;;
esac
