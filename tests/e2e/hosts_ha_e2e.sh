#!/usr/bin/env bash
# Partition (a) of issue 35 on hosts made of network namespaces (tests/e2e/hosts_lib.sh): HA on
# three controller hosts, installed from the packages as docs/operations.md ("HA on three hosts")
# says: ctl1..3 each run an etcd member (mutual TLS with etcd's own CA, RBAC confining schedd's
# certificate to /mlsched/) and a schedd replica (mlsched-schedd.service, --ha etcd://...); the
# agents on gpu-c, gpu-d and cpu-b and the users on login know the three replicas.
# While a training job runs and alice submits a job a second, the leader's host is cut off from
# every other host (its etcd member is then in the minority, its agents unreachable):
#   - a new leader is elected on the majority side; the old one steps down by itself (its lease
#     lapses) and exits (status 3), and its writes are refused (counted from its log);
#   - no acknowledged submission is lost, none runs twice, the training job completes;
#   - healed, the old leader's host comes back as a follower (the unit's Restart=on-failure).
# Prints the counts: acknowledged, completed, lost, ran twice, fenced (refused) writes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${MLSCHED_BUILD_DIR:-$ROOT/build}"
export MLSCHED_STATE="${MLSCHED_STATE:-$BIN/e2e-hosts-ha-state}"
E2E_NAME=hosts-ha
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
fail() { say "FAILED: $*" >&2; for f in "$HOSTS_STATE"/logs/*.log; do echo "---- $f" >&2; tail -12 "$f" >&2; done; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIPPED: needs root (network namespaces, overlayfs)"; exit 0; }
command -v etcd >/dev/null && command -v etcdctl >/dev/null || fail "etcd is missing (scripts/install-deps.sh)"
PKGS="${MLSCHED_PACKAGES:-$BIN/packages}"
ls "$PKGS"/mlsched-schedd_*.deb >/dev/null 2>&1 || MLSCHED_BUILD_DIR="$BIN" bash "$ROOT/scripts/package.sh" >/dev/null
rm -rf "$MLSCHED_STATE"; mkdir -p "$MLSCHED_STATE"
export HOSTS_STATE="$MLSCHED_STATE"
# shellcheck source=tests/e2e/hosts_lib.sh
source "$ROOT/tests/e2e/hosts_lib.sh"
trap hosts_down EXIT
CTLS="ctl1 ctl2 ctl3" NODES="gpu-c gpu-d cpu-b"
hosts_base "$PKGS"/mlsched-{schedd,agentd,client,trainer}_*.deb
hosts_up $CTLS $NODES login

say "certificates (mlsched-certs): the cluster CA, schedd's for ctl1..3, nodes'; etcd's CA, members', schedd's etcd client"
CERTS="$MLSCHED_STATE/base/upper/usr/sbin/mlsched-certs" X="$MLSCHED_STATE/xfer"
bash "$CERTS" "$X" ca >/dev/null
bash "$CERTS" "$X" schedd ctl1 ctl2 ctl3 10.213.0.11 10.213.0.12 10.213.0.13 >/dev/null
for n in $NODES; do bash "$CERTS" "$X" node "$n" >/dev/null; done
bash "$CERTS" "$X" etcd-ca >/dev/null
for i in 1 2 3; do bash "$CERTS" "$X" etcd-member "etcd-$i" "ctl$i" "10.213.0.1$i" >/dev/null; done
bash "$CERTS" "$X" etcd-client mlsched-schedd >/dev/null
chmod -R go+rX "$X"  # readable in transit only (the hosts copy keys 0600)

ENDPOINTS=ctl1:2379,ctl2:2379,ctl3:2379 SERVERS=ctl1:7070,ctl2:7070,ctl3:7070
CLUSTER=etcd-1=https://ctl1:2380,etcd-2=https://ctl2:2380,etcd-3=https://ctl3:2380
for i in 1 2 3; do
  h=ctl$i
  on "$h" sh -ec "
    install -d -m 0755 /etc/mlsched/tls /etc/mlsched/etcd
    install -m 0644 /mnt/xfer/ca.pem /mnt/xfer/schedd.pem /etc/mlsched/tls/
    install -m 0600 -o mlsched -g mlsched /mnt/xfer/schedd.key /etc/mlsched/tls/schedd.key
    install -m 0644 /mnt/xfer/etcd/ca.pem /etc/mlsched/etcd/ca.pem
    install -m 0644 /mnt/xfer/etcd/clients/mlsched-schedd.pem /etc/mlsched/etcd/schedd.pem
    install -m 0600 -o mlsched -g mlsched /mnt/xfer/etcd/clients/mlsched-schedd.key /etc/mlsched/etcd/schedd.key
    install -d -m 0700 /etc/etcd-mlsched
    install -m 0644 /mnt/xfer/etcd/ca.pem /mnt/xfer/etcd/etcd-$i.pem /etc/etcd-mlsched/
    install -m 0600 /mnt/xfer/etcd/etcd-$i.key /etc/etcd-mlsched/
    sed -i '/^SCHEDD_ARGS=/d' /etc/mlsched/schedd.env
    echo 'SCHEDD_ARGS=\"--listen-tcp 0.0.0.0:7070 --advertise $h:7070 --tls-cert /etc/mlsched/tls/schedd.pem --tls-key /etc/mlsched/tls/schedd.key --tls-ca /etc/mlsched/tls/ca.pem --metrics-port 9465 --policy /etc/mlsched/policy.toml --ha etcd://$ENDPOINTS --etcd-tls-ca /etc/mlsched/etcd/ca.pem --etcd-tls-cert /etc/mlsched/etcd/schedd.pem --etcd-tls-key /etc/mlsched/etcd/schedd.key --heartbeat-interval 1 --heartbeat-timeout 6\"' >> /etc/mlsched/schedd.env"
  # etcd as the member of a 3-host cluster (client and peer mutual TLS). --pre-vote: a member back
  # from a partition does not depose the majority's raft leader with its higher term (etcd 3.4's
  # default is off; without it the heal cost a second takeover here)
  setsid nsenter -t "$(cat "$HOSTS_STATE/pids/$h")" -m -u -n -i -r -w etcd --name "etcd-$i" --data-dir /var/lib/etcd-mlsched \
    --listen-client-urls "https://10.213.0.1$i:2379" --advertise-client-urls "https://$h:2379" \
    --listen-peer-urls "https://10.213.0.1$i:2380" --initial-advertise-peer-urls "https://$h:2380" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token mlsched-hosts \
    --client-cert-auth --trusted-ca-file /etc/etcd-mlsched/ca.pem --cert-file "/etc/etcd-mlsched/etcd-$i.pem" --key-file "/etc/etcd-mlsched/etcd-$i.key" \
    --peer-client-cert-auth --peer-trusted-ca-file /etc/etcd-mlsched/ca.pem --peer-cert-file "/etc/etcd-mlsched/etcd-$i.pem" \
    --peer-key-file "/etc/etcd-mlsched/etcd-$i.key" --peer-cert-allowed-hostname member.etcd.mlsched --pre-vote \
    > "$HOSTS_STATE/logs/$h-etcd.log" 2>&1 < /dev/null &
  disown; echo $! > "$HOSTS_STATE/pids/$h-etcd"
done
etcd_on() {  # HOST ARGS...: etcdctl on HOST with schedd's etcd client certificate
  local h=$1; shift
  on "$h" env ETCDCTL_API=3 etcdctl --endpoints "$ENDPOINTS" --dial-timeout 2s --command-timeout 5s \
    --cacert /etc/mlsched/etcd/ca.pem --cert /etc/mlsched/etcd/schedd.pem --key /etc/mlsched/etcd/schedd.key "$@"
}
for _ in $(seq 1 60); do etcd_on ctl1 endpoint health >/dev/null 2>&1 && break; sleep 0.5; done
etcd_on ctl1 endpoint health >/dev/null 2>&1 || fail "etcd did not form a cluster on ctl1..3"
say "etcd RBAC: root, a role with readwrite on /mlsched/ only for the user schedd's certificate names"
{
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | etcd_on ctl1 user add root --interactive=false
  etcd_on ctl1 role add mlsched
  etcd_on ctl1 role grant-permission mlsched readwrite /mlsched/ --prefix
  etcd_on ctl1 user add mlsched-schedd --no-password
  etcd_on ctl1 user grant-role mlsched-schedd mlsched
  etcd_on ctl1 auth enable
} > "$HOSTS_STATE/logs/etcd-rbac.log" 2>&1 || fail "etcd RBAC setup failed"

for n in $NODES; do
  agent_configure "$n" "--server $SERVERS --pool on-demand --region lab --zone lab-a --domain rack-1 --cpus 2 --mem 4G --cutoff-timeout 20"
done
client_configure login
munge_up $CTLS $NODES login || fail "munged did not start"
for h in $CTLS; do unit_start "$h" mlsched-schedd; done
for n in $NODES; do unit_start "$n" mlsched-agentd; done

as_alice() { on login setpriv --reuid alice --regid alice --init-groups env HOME=/shared/alice MLSCHED_SERVER=$SERVERS MLSCHED_RETRY=60 "$@"; }
as_admin() { on login env MLSCHED_SERVER=$SERVERS "$@"; }
ha_json() { as_admin mladmin ha status --json 2>/dev/null || true; }
leader() { ha_json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("leader", ""))' 2>/dev/null || true; }
epoch() { ha_json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("epoch", 0))' 2>/dev/null || echo 0; }
for _ in $(seq 1 150); do [ "$(up_nodes)" -ge 3 ] && break; sleep 0.2; done
[ "$(up_nodes)" -ge 3 ] || fail "the agents did not register with the HA leader"
L=$(leader) E=$(epoch)
[ -n "$L" ] || fail "no leader"
say "leader $L at epoch $E; 3 nodes registered"

cat > "$MLSCHED_STATE/shared/alice/train.sh" <<'JOB'
#!/bin/sh
#MLSUB -J fmnist-ha
#MLSUB -c 2
#MLSUB --mem-per-task 1G
#MLSUB -o train-%j-%t.out
exec mltrain --epochs 40 --threads 1 --checkpoint-url "file:///shared/alice/ckpt-$MLSCHED_JOB_ID" --checkpoint-every 100
JOB
cat > "$MLSCHED_STATE/shared/alice/short.sh" <<'JOB'
#!/bin/sh
#MLSUB -J short
#MLSUB -c 1
#MLSUB --mem-per-task 64M
#MLSUB -o short-%j.out
echo ran "$MLSCHED_JOB_ID attempt $MLSCHED_ATTEMPT"
JOB
chown -R --reference="$MLSCHED_STATE/shared/alice" "$MLSCHED_STATE/shared/alice"
TRAIN=$(as_alice sh -c 'cd /shared/alice && mlsub --parsable -n 2 train.sh') || fail "mlsub failed"
for _ in $(seq 1 120); do [ "$(as_alice mlq -j "$TRAIN" -h -o %T)" = RUNNING ] && break; sleep 0.5; done

# alice submits one short job a second until told to stop; acknowledged ids go to acked
: > "$MLSCHED_STATE/acked"
( while [ ! -e "$MLSCHED_STATE/stop-submitting" ]; do
    as_alice sh -c 'cd /shared/alice && mlsub --parsable short.sh' >> "$MLSCHED_STATE/acked" 2>/dev/null || true
    sleep 1
  done ) &
SUBMITTER=$!
sleep 5
LH=${L%%:*}
skip_old=$(wc -l < "$HOSTS_STATE/logs/$LH-mlsched-schedd.log")
# Which host's etcd member leads Raft now (the latest "became leader"): when it is $LH too, etcd
# elects a new Raft leader first, and that one gives every lease its whole TTL again (etcd's lessor
# on promotion), so the takeover is slower.
RAFT_HOST=$(for h in ctl1 ctl2 ctl3; do { grep -h 'became leader' "$HOSTS_STATE/logs/$h-etcd.log" || true; } | tail -1 | sed "s/\$/ $h/"; done |
  sort | tail -1 | awk '{print $NF}')
[ -n "$RAFT_HOST" ] || RAFT_HOST="no host (no 'became leader' in the etcd logs)"
say "(a) cutting the leader's host $LH off from every other host (etcd minority, agents and users unreachable)"
t0=$(date +%s.%N)
link_cut "$LH" both
NL="" NE=0
for _ in $(seq 1 120); do
  NE=$(epoch); NL=$(leader)
  [ -n "$NL" ] && [ "$NL" != "$L" ] && [ "$NE" -gt "$E" ] && break
  sleep 0.5
done
[ "$NE" -gt "$E" ] || fail "(a) no new leader on the majority side"
took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
say "(a) $NL leads at epoch $NE, $took s after the cut (etcd's Raft leader was on $RAFT_HOST)"
for _ in $(seq 1 60); do
  tail -n +"$((skip_old + 1))" "$HOSTS_STATE/logs/$LH-mlsched-schedd.log" | qgrep 'HA: stepping down\|lost leadership' && break; sleep 0.5
done
down_line=$(tail -n +"$((skip_old + 1))" "$HOSTS_STATE/logs/$LH-mlsched-schedd.log" | grep -m1 'HA: stepping down' || true)
[ -n "$down_line" ] || fail "(a) the cut-off leader on $LH did not step down by itself"
FENCED=$(grep -o '[0-9]* write(s) refused by the fence' <<<"$down_line" | cut -d' ' -f1)
say "(a) the old leader on $LH stepped down by itself: ${down_line#*] }"
sleep 20
link_heal "$LH"
say "(a) healed after $(python3 -c "import time; print(f'{time.time() - $t0:.0f}')") s"
# the old leader's replica (restarted by its unit) is back among the members, as a follower
is_follower() { ha_json | python3 -c 'import json,sys; sys.exit(0 if any(m.get("address") == sys.argv[1] and m.get("role") == "follower" for m in json.load(sys.stdin).get("members", [])) else 1)' "$L"; }
back=""
for _ in $(seq 1 120); do is_follower && { back=1; break; }; sleep 0.5; done
[ -n "$back" ] || { ha_json >&2; fail "(a) the old leader $L did not come back as a follower after the heal"; }
say "(a) $L is back as a follower $(python3 -c "import time; print(f'{time.time() - $t0:.0f}')") s after the cut"
touch "$MLSCHED_STATE/stop-submitting"; wait "$SUBMITTER" || true
[ "$(leader)" = "$NL" ] || say "(a) note: the leader changed again after the heal: $(leader)"

# every acknowledged job completes once; the training job completes
mapfile -t ACKED < <(grep -E '^[0-9]+$' "$MLSCHED_STATE/acked")
lost=0 twice=0 done=0
for j in "${ACKED[@]}" "$TRAIN"; do
  s=""
  for _ in $(seq 1 240); do
    s=$(as_alice mlq -j "$j" -h -o %T 2>/dev/null || echo MISSING)
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
    sleep 0.5
  done
  if [ "$s" = COMPLETED ]; then done=$((done + 1)); else lost=$((lost + 1)); say "job $j: $s"; fi
done
for j in "${ACKED[@]}"; do
  n=$(grep -c "^ran $j " "$MLSCHED_STATE/shared/alice/short-$j.out" 2>/dev/null || true)
  [ "$n" -le 1 ] || twice=$((twice + 1))
done
[ "$(cat "$MLSCHED_STATE"/shared/alice/train-"$TRAIN"-*.out | grep -c '^done at step')" = 1 ] || twice=$((twice + 1))
say "(a) training job $TRAIN: $(as_alice mlacct -j "$TRAIN" -n -P -o Attempts) attempt(s) across the takeover"
say "(a) counts: acknowledged $(( ${#ACKED[@]} + 1 )), completed $done, lost $lost, ran twice $twice, writes refused by the fence ${FENCED:-0}"
[ "$lost" = 0 ] && [ "$twice" = 0 ] || fail "(a) lost or duplicated jobs"
say PASSED
