#!/usr/bin/env bash
# Benchmark of the client path (not a test; issue 14, point 6): one CLI process per job, sequential,
# durable acknowledgement included. In one run on this machine:
#   mlsub -H --wrap true   against the local cluster's schedd (SQLite) over TLS + MUNGE, and over
#                          its Unix socket;
#   sbatch --hold --wrap=true  against a private slurmctld (Debian's slurmctld, state on disk,
#                          auth/munge through the same private munged), when slurmctld and sbatch
#                          are installed (apt-get install slurmctld slurm-client); else ours only.
# ROUNDS rounds of JOBS submissions each, alternating the tools so that machine noise hits both;
# prints each tool's jobs/s (median round) and the ratio.
# Usage: bench/server/cli_vs_sbatch.sh [JOBS=150] [ROUNDS=5]   (MLSCHED_BUILD_DIR, default ./build)
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${1:-150} ROUNDS=${2:-5}
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
export MLSCHED_BUILD_DIR="$BIN"
STATE=$(mktemp -d /tmp/mlsched-cli-bench.XXXXXX)
SLURM_DIR="$STATE/slurm"
cleanup() {
  [ -f "$SLURM_DIR/slurmctld.pid" ] && kill "$(cat "$SLURM_DIR/slurmctld.pid")" 2>/dev/null || true
  MLSCHED_STATE=$STATE bash scripts/local-cluster.sh down >/dev/null 2>&1 || true
  [ -n "${KEEP_STATE:-}" ] || rm -rf "$STATE"
}
trap cleanup EXIT
MLSCHED_STATE=$STATE MLSCHED_SERVER= bash scripts/local-cluster.sh up >/dev/null
# shellcheck disable=SC1091
source "$STATE/env.sh"
TLS_SERVER=$MLSCHED_SERVER UNIX_SERVER="unix:$STATE/schedd.sock"
[ -S "$STATE/schedd.sock" ] || UNIX_SERVER=""

start_slurm() {  # a private slurmctld on a free port; held jobs need no slurmd
  command -v slurmctld >/dev/null && command -v sbatch >/dev/null || return 1
  local port host
  port=$(awk 'BEGIN { srand(); print 20000 + int(rand() * 20000) }') host=$(hostname -s)
  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool"
  cat > "$SLURM_DIR/slurm.conf" <<EOF
ClusterName=mlschedbench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$MLSCHED_MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MaxJobCount=1000000
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF="$SLURM_DIR/slurm.conf"
  slurmctld -c -f "$SLURM_CONF" || return 1
  for _ in $(seq 1 100); do
    sbatch --hold --wrap=true -o /dev/null >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "slurmctld did not answer; see $SLURM_DIR/slurmctld.log" >&2
  return 1
}

round() {  # NAME COMMAND...: JOBS sequential runs of COMMAND; prints jobs/s
  local t0 t1
  t0=$(date +%s.%N)
  for _ in $(seq 1 "$JOBS"); do "${@:2}" >/dev/null; done
  t1=$(date +%s.%N)
  awk -v n="$JOBS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", n / (b - a) }' >> "$STATE/$1.rates"
}
median() { sort -n "$STATE/$1.rates" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

slurm=0
if start_slurm; then slurm=1; else echo "(sbatch not measured: slurmctld/sbatch not installed or not starting)"; fi
"$BIN/cli/mlsub" -H -D /tmp --wrap true >/dev/null  # warm-up
for _ in $(seq 1 "$ROUNDS"); do
  round mlsub_tls "$BIN/cli/mlsub" --server "$TLS_SERVER" -H -D /tmp --wrap true
  [ -n "$UNIX_SERVER" ] && round mlsub_unix "$BIN/cli/mlsub" --server "$UNIX_SERVER" -H -D /tmp --wrap true
  [ "$slurm" = 1 ] && round sbatch sbatch --hold -o /dev/null --wrap=true
done
echo "one process per job, $JOBS sequential submissions x $ROUNDS rounds (median round), $(nproc) cores:"
echo "  mlsub -H, TLS + MUNGE:   $(median mlsub_tls) jobs/s"
[ -n "$UNIX_SERVER" ] && echo "  mlsub -H, Unix socket:   $(median mlsub_unix) jobs/s"
if [ "$slurm" = 1 ]; then
  echo "  sbatch --hold (22.05):   $(median sbatch) jobs/s"
  awk -v a="$(median mlsub_tls)" -v b="$(median sbatch)" 'BEGIN { printf "  ratio mlsub TLS+MUNGE / sbatch: %.2fx\n", a / b }'
fi
