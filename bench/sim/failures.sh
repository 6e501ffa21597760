#!/usr/bin/env bash
# bench/sim/failures.sh BUILD_DIR [PHILLY_JOBS]: the node-failure figures of schedd/sim/README.md
# ("Node failures and the watchdog", issue 33 point 5) in one command. On bench/sim/elastic's
# fixed fleet (16 nodes x 4 V100, 8 of them spot), FIFO + EASY, checkpoints every 30 minutes:
#   * the 8 Pollux workloads (apps.toml run times) x seeds 1-3: sums over the 24 replays;
#   * the Philly trace's first PHILLY_JOBS gangs (default 2000), seeds 1-3;
# each replayed with blind retry (a crashed node reboots in 10 min and is used again unrepaired; a
# hung gang holds its nodes until its time limit) and with health checks and the watchdog
# (--drain-after 2: a node that failed twice within a day is drained and repaired for 3 days; a
# hang is found 30.5 min after it starts: the default stall_after and the diagnosis).
# The assumption: 2 nodes of 16 are bad and fail once per 10 node-hours, the others once per
# 2,000 node-hours; 30 % of failures hang the gang (an all-reduce that never returns) instead of
# crashing it. FAILURES="..." overrides those flags. About 1 minute on the 2-core machine.
set -euo pipefail
build=$(realpath "$1")
philly_jobs=${2:-2000}
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$src/bench/sim/elastic
traces=${TRACES:-$src/../shared/traces/gpu}
mlsim=$build/schedd/sim/mlsim
failures=${FAILURES:---node-failures 0.0005 --bad-nodes 0.125 --bad-node-failures 0.1 --hang-fraction 0.3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
replay() {  # NAME ARGS...: one replay's JSON into $out/NAME.json
  local name=$1; shift
  # shellcheck disable=SC2086
  "$mlsim" --cluster "$dir/fleet-fixed.toml" --policy "$dir/policy-fixed.toml" --checkpoint-interval 1800 \
    $failures --json "$@" > "$out/$name.json"
}
for mode in blind health; do
  flags="--drain-after 0"; [ "$mode" = health ] && flags="--drain-after 2"
  for seed in 1 2 3; do
    for w in 1 2 3 4 5 6 7 8; do
      # shellcheck disable=SC2086
      replay "pollux.$mode.w$w.s$seed" --trace "$traces/pollux-workloads/workload-$w.csv" --app-runtimes "$dir/apps.toml" \
        --seed "$seed" $flags
    done
    # shellcheck disable=SC2086
    replay "philly.$mode.s$seed" --trace "$traces/philly-2017-09-10.csv" --max-jobs "$philly_jobs" --seed "$seed" $flags
  done
done
python3 - "$out" "$philly_jobs" "$failures" <<'PY'
import glob, json, os, sys
out, philly_jobs, failures = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"faults: {failures}")
for trace, title in (("pollux", "Pollux workloads 1-8 x seeds 1-3 (sums of 24 replays; JCT: mean)"),
                     ("philly", f"Philly, first {philly_jobs} gangs x seeds 1-3 (sums of 3 replays; JCT: mean)")):
    print(f"\n{title}")
    print(f"{'mode':<8} {'failures':>8} {'hangs':>6} {'drains':>6} {'GPU-h lost to failures':>23} {'all GPU-h lost':>14} "
          f"{'mean JCT h':>10} {'unfinished':>10}")
    res = {}
    for mode in ("blind", "health"):
        rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, f"{trace}.{mode}.*.json")))]
        s = lambda k: sum(r.get(k, 0) for r in rows)
        res[mode] = r = {"failures": s("node_failures"), "hangs": s("hangs"), "drains": s("health_drains"),
                         "lost_f": s("lost_failure_resource_hours"), "lost": s("lost_resource_hours"),
                         "jct": s("mean_response_s") / len(rows) / 3600, "unfinished": s("unfinished")}
        print(f"{mode:<8} {r['failures']:>8} {r['hangs']:>6} {r['drains']:>6} {r['lost_f']:>23.1f} {r['lost']:>14.1f} "
              f"{r['jct']:>10.2f} {r['unfinished']:>10}")
    b, h = res["blind"], res["health"]
    cut = 1 - h["lost_f"] / b["lost_f"] if b["lost_f"] > 0 else 0
    print(f"health checks + watchdog: {cut:.0%} fewer GPU-hours lost to failures than blind retry "
          f"({'met' if cut >= 0.5 else 'not met'}; goal: 50 % or more); mean JCT {h['jct'] / b['jct'] - 1:+.1%}")
PY
