#!/usr/bin/env bash
# bench/sim/speed.sh BUILD_DIR [--gpu-1m] [--compare]: the simulator-speed figures of schedd/sim/README.md
# ("Idle passes and long queues") in one command. Prints, per configuration, the wall time of the
# whole command (trace reading or workload generation included, so slightly above the simulation
# times mlsim_bench prints) of the replay (best of RUNS runs, default 3; the machine is shared):
#   * SDSC-BLUE-size synthetic (230,000 jobs, 1,152 processors): no backfill, EASY, conservative,
#     with the idle shortcuts and (--compare) without them (no backfill without them: its first
#     20,000 jobs, both ways, since the whole run takes over 10 minutes);
#   * the public Philly trace (52,849 gangs) on mlsim's default fleet (16 nodes x 4 GPUs) with the
#     default policy (no backfill) and with EASY (the whole trace: about 5 s since the shape
#     records of pending_view.h; builds before them took over 10 minutes, so time only the first
#     10,000 gangs there: `mlsim --trace ... --max-jobs 10000 --backfill easy`);
#   * with --gpu-1m, the 1,000,000-job x 10,000-node GPU profile under EASY (one run; long).
set -euo pipefail
build=$(realpath "$1"); shift
src=$(cd "$(dirname "$0")/../.." && pwd)
runs=${RUNS:-3}
gpu=false; compare=false
for a in "$@"; do
  case $a in
    --gpu-1m) gpu=true ;;
    --compare) compare=true ;;
    *) echo "usage: bench/sim/speed.sh BUILD_DIR [--gpu-1m] [--compare]" >&2; exit 2 ;;
  esac
done
bench=$build/bench/sim/mlsim_bench
mlsim=$build/schedd/sim/mlsim
best() {  # LABEL CMD...: the minimum wall time of $runs runs
  local label=$1; shift
  local min=""
  for _ in $(seq "$runs"); do
    local t0 t1 s
    t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N)
    s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    if [ -z "$min" ] || awk -v s="$s" -v m="$min" 'BEGIN { exit !(s < m) }'; then min=$s; fi
  done
  printf '%-44s %8.2f s (best of %d)\n' "$label" "$min" "$runs"
}
for mode in none easy conservative; do
  best "SDSC-BLUE-size $mode" "$bench" --synthetic-blue "$mode"
  if $compare && [ "$mode" = none ]; then
    best "SDSC-BLUE-size 20k jobs none" "$bench" --synthetic-blue --jobs 20000 none
    best "SDSC-BLUE-size 20k jobs none, no shortcuts" "$bench" --synthetic-blue --jobs 20000 --no-shortcuts none
  elif $compare; then
    best "SDSC-BLUE-size $mode, no shortcuts" "$bench" --synthetic-blue --no-shortcuts "$mode"
  fi
done
philly=$src/tests/data/traces/philly-2017-09-10.csv.gz
best "Philly, 16 x 4 GPUs, default policy" "$mlsim" --trace "$philly"
best "Philly, 16 x 4 GPUs, EASY" "$mlsim" --trace "$philly" --backfill easy
if $gpu; then
  RUNS=1 best "GPU 1M jobs x 10k nodes, EASY" "$bench" --synthetic-gpu easy
fi
