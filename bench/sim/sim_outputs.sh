#!/usr/bin/env bash
# bench/sim/sim_outputs.sh BUILD_DIR OUT_DIR: records mlsim's JSON and per-job CSV for every
# configuration the sim validation tests pin (KTH-SP2, SDSC-SP2: no backfill, EASY, exact run
# times, shortest-first, conservative with and without kept plans, predicted run times, start
# estimates, the shipped policies), plus Philly (first 10,000 jobs; the whole trace under EASY),
# Alibaba, Pollux on a spot fleet with evictions, the preemption benchmark and the synthetic
# SDSC-BLUE-size digests.
# Run it before and after a change to the core or the simulator and `diff -r` the two folders:
# any byte that differs is a changed decision. About 5-15 minutes on the 2-core machine.
set -euo pipefail
build=$(realpath "$1"); out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
data=$src/tests/data/traces
mkdir -p "$out"
mlsim=$build/schedd/sim/mlsim
run() {  # NAME ARGS...: one replay, JSON on stdout, CSV beside it
  local name=$1; shift
  "$mlsim" "$@" --json --jobs-csv "$out/$name.csv" > "$out/$name.json"
}
for t in KTH-SP2 SDSC-SP2; do
  f=$data/$t.input.swf.gz
  run "$t-none" --trace "$f" --backfill none
  run "$t-easy" --trace "$f" --backfill easy
  run "$t-easy-exact" --trace "$f" --backfill easy --exact-runtimes
  run "$t-cons-exact" --trace "$f" --backfill conservative --exact-runtimes
  run "$t-easy-sjf" --trace "$f" --backfill easy --backfill-order shortest-first
  run "$t-cons-keep" --trace "$f" --backfill conservative --keep-plans
  run "$t-cons-est" --trace "$f" --backfill conservative --start-estimates
  run "$t-cons-pred-est" --trace "$f" --backfill conservative --predict-runtimes --start-estimates
  run "$t-cons-shadow-est" --trace "$f" --backfill conservative --estimate-with-predictions --start-estimates
  run "$t-easy-pred" --trace "$f" --backfill easy --predict-runtimes
  run "$t-none-period" --trace "$f" --backfill none --cycle-period 600
  for p in fairshare-age fairshare-age-sjf fairshare-sjf-slow-decay; do
    run "$t-$p" --trace "$f" --policy "$src/schedd/sim/policies/$p.toml"
  done
  run "$t-default" --trace "$f" --policy "$src/policies/default.toml"
done
ph=$data/philly-2017-09-10.csv.gz
for b in none easy conservative; do run "philly10k-$b" --trace "$ph" --max-jobs 10000 --backfill "$b"; done
# The whole trace under EASY (5 s since the shape records; over 10 minutes on builds before them).
run philly-easy --trace "$ph" --backfill easy
run alibaba-easy --trace "$data/openb_pod_list_default.csv.gz" --backfill easy
apps=$out/apps.toml
printf 'cifar10 = 3600\ndeepspeech2 = 7200\nncf = 900\nbert = 5400\nimagenet = 43200\nyolov3 = 14400\n' > "$apps"
for b in none easy conservative; do
  run "pollux-spot-$b" --trace "$data/pollux-workload-1.csv" --app-runtimes "$apps" \
    --cluster "$src/schedd/sim/clusters/spot-gpu-fleet.toml" --checkpoint-interval 1800 \
    --seed 42 --backfill "$b" --policy "$src/schedd/sim/policies/qos-preempt.toml"
done
"$build/bench/sim/preemption_bench" --seeds 1,2,3 --rates 0,0.05 --per-seed > "$out/preemption_bench.txt"
bench=$build/bench/sim/mlsim_bench
if { "$bench" --help 2>&1 || true; } | grep -q -- --digest; then
  # Synthetic SDSC-BLUE-size, 20,000 jobs: the digests with and without the idle shortcuts.
  for flag in "" --no-shortcuts; do
    "$bench" --synthetic-blue --jobs 20000 --digest $flag none easy conservative |
      grep -E 'digest|bsld' > "$out/synthetic-blue-20k${flag:+-no-shortcuts}.txt"
  done
fi
