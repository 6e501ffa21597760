#!/usr/bin/env bash
# The main job: on a fresh Debian 12 machine, installs dependencies, builds, starts a local cluster
# (schedd + 4 agents on loopback, SQLite state), runs a 4-task gang job through mlsub, shows mlq
# while it runs, prints what each rank saw, and stops the cluster. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
export MLSCHED_STATE="${MLSCHED_STATE:-$PWD/.state/demo-$$}"
export MLSCHED_SERVER="unix:$MLSCHED_STATE/schedd.sock"
trap 'bash scripts/local-cluster.sh down' EXIT
bash scripts/local-cluster.sh up
"$BIN/cli/mladmin" nodes

OUT="$MLSCHED_STATE/demo-out"
mkdir -p "$OUT"
cat > "$OUT/gang.sh" <<'JOB'
#!/bin/sh
#MLSUB -J gang-demo
#MLSUB -n 4
#MLSUB -c 1
#MLSUB -t 5:00
#MLSUB -o gang-%j-%t.out
echo "rank $RANK of $WORLD_SIZE (local rank $LOCAL_RANK) on $MLSCHED_NODE; rendezvous $MASTER_ADDR:$MASTER_PORT"
sleep 3
JOB
JOB=$("$BIN/cli/mlsub" --parsable -D "$OUT" "$OUT/gang.sh")
echo "Submitted job $JOB"
sleep 1
"$BIN/cli/mlq"
for i in $(seq 1 120); do
  state=$("$BIN/cli/mlq" -j "$JOB" -h -o "%T")
  case "$state" in COMPLETED) break ;; FAILED|CANCELLED|TIMEOUT) echo "job $JOB ended $state" >&2; exit 1 ;; esac
  sleep 0.5
done
"$BIN/cli/mlq" -j "$JOB"
[ "$state" = COMPLETED ] || { echo "job $JOB did not complete (state $state)" >&2; exit 1; }
cat "$OUT"/gang-"$JOB"-*.out
[ "$(cat "$OUT"/gang-"$JOB"-*.out | wc -l)" -eq 4 ] || { echo "expected 4 ranks of output" >&2; exit 1; }
echo "demo: gang job $JOB ran 4 ranks on the local cluster"
