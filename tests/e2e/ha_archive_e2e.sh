#!/usr/bin/env bash
# End to end, real daemons: HA mode's history archive (schedd/server/etcd_archive.h). An HA local
# cluster whose replicas archive after seconds instead of a day runs a few short jobs; then:
#   - the finished jobs leave etcd (no key under jobs/, specs/, attempts/ or events/ of them);
#   - every replica, followers included, has them in its own SQLite history (db-N/state.db);
#   - `mlreport --ha ... --state-dir` (etcd plus one replica's history) counts every job once,
#     reading etcd over mutual TLS with schedd's etcd client certificate;
#   - a job still running is not archived.
# Environment: MLSCHED_BUILD_DIR, MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
export MLSCHED_HA_BASE_PORT=${MLSCHED_HA_BASE_PORT:-32479}
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
E2E_NAME=ha-archive-e2e
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
trap 'bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
MLSCHED_HA_SCHEDD_ARGS="--min-job-age 1 --ha-archive-after 61 --ha-archive-interval 2 --ha-archive-copy-interval 1" \
  bash "$ROOT/scripts/local-cluster.sh" up --ha >/dev/null
# shellcheck disable=SC1091
source "$MLSCHED_STATE/env.sh"
OUT="$MLSCHED_STATE/out"
etcd_keys() {  # keys under /mlsched/$1 (etcd on mutual TLS: schedd's etcd client certificate)
  local keys
  keys=$(etcd_ctl get "/mlsched/$1" --prefix --keys-only) || fail "etcdctl cannot read etcd"
  grep -c "^/mlsched/$1" <<<"$keys" || true
}
jobs_in() { awk -F, '$1 == "usage" { n += $4 } END { print n + 0 }'; }  # mlreport --csv: jobs per user
history_jobs() {  # replica N: jobs in its SQLite history (mlreport's usage rows)
  { "$BIN/schedd/report/mlreport" --state-dir "$MLSCHED_STATE/db-$1" -S @0 --csv 2>/dev/null || true; } | jobs_in
}

N=5
ids=()
for i in $(seq 1 $N); do ids+=("$("$BIN/cli/mlsub" --parsable -D "$OUT" -J "arch-$i" -n 1 -c 1 -t 2:00 -o /dev/null --wrap true)"); done
long=$("$BIN/cli/mlsub" --parsable -D "$OUT" -J long -n 1 -c 1 -t 10:00 -o /dev/null --wrap 'sleep 300')
say "submitted $N short jobs (${ids[*]}) and one long one ($long)"
deadline=$(( $(date +%s) + 150 ))
while :; do
  in_etcd=$(etcd_keys jobs/)
  h1=$(history_jobs 1) h2=$(history_jobs 2) h3=$(history_jobs 3)
  [ "$in_etcd" -eq 1 ] && [ "$h1" -eq $N ] && [ "$h2" -eq $N ] && [ "$h3" -eq $N ] && break
  [ "$(date +%s)" -lt "$deadline" ] || fail "after 150 s: $in_etcd job(s) in etcd, history: $h1 / $h2 / $h3 of $N"
  sleep 2
done
say "etcd holds only the running job; each replica's history holds the $N finished ones"
[ "$(etcd_keys specs/)" -eq 1 ] || fail "specs of archived jobs are still in etcd"
[ "$(field "$long" %T)" = RUNNING ] || fail "the long job is $(field "$long" %T)"
grep -q "moved $N finished job(s)" "$MLSCHED_STATE"/logs/schedd-*.log || say "(the jobs were moved over several passes)"
total=$("$BIN/schedd/report/mlreport" --ha "etcd://$MLSCHED_ETCD" --etcd-tls-ca "$MLSCHED_ETCD_CACERT" \
  --etcd-tls-cert "$MLSCHED_ETCD_CERT" --etcd-tls-key "$MLSCHED_ETCD_KEY" --state-dir "$MLSCHED_STATE/db-2" -S @0 --csv | jobs_in)
say "mlreport --ha with replica 2's history counts $total job(s)"
# The running job has an attempt but no end yet; it counts once too.
[ "$total" -eq $((N + 1)) ] || fail "mlreport --ha --state-dir counted $total jobs, expected $((N + 1))"
"$BIN/cli/mlcancel" "$long"
say "passed: $N finished jobs moved out of etcd into all 3 replicas' histories; mlreport reads both"
