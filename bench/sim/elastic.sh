#!/usr/bin/env bash
# bench/sim/elastic.sh BUILD_DIR [PHILLY_JOBS]: the elastic-gang and elastic-capacity figures of
# schedd/sim/README.md ("Elastic gangs and provisioning", issue 16 point 5) in one command.
# Replays, on the Pollux experiments' 64 GPUs (16 nodes x 4 V100, 8 of them spot evicted at 0.1 per
# node-hour, checkpoints every 30 minutes, FIFO + EASY, [elastic] grows, V100 prices):
#   * the 8 Pollux workloads (apps.toml run times) x seeds 1-3: means over the 24 replays;
#   * the Philly trace's first PHILLY_JOBS gangs (default 2000; the whole trace is 7x the fleet);
# rigid vs elastic (--elastic 0.25: any size in [ceil(n/4), n]) with a linear speed-up and with a
# sub-linear one (--speedup-exponent 0.7), on the fixed fleet (fleet-fixed.toml) and on a
# provisioned one (8 on-demand nodes + up to 8 spot nodes created on demand within 21.60 per hour,
# fleet-provisioned.toml + policy-provisioned.toml, 120 s boot delay). Prints one table per trace
# and the two goals' verdicts; every elastic configuration runs again with [elastic] start =
# "earliest-finish" (rows "... ef"). About 1.5 minutes on the 2-core machine.
set -euo pipefail
build=$(realpath "$1")
philly_jobs=${2:-2000}
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$src/bench/sim/elastic
traces=${TRACES:-$src/../shared/traces/gpu}
mlsim=$build/schedd/sim/mlsim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
configs=(
  "fixed rigid|fixed|"
  "fixed elastic linear|fixed|--elastic 0.25"
  "fixed elastic k^0.7|fixed|--elastic 0.25 --speedup-exponent 0.7"
  "fixed rigid k^0.7|fixed|--speedup-exponent 0.7"
  "provisioned rigid|provisioned|"
  "provisioned elastic linear|provisioned|--elastic 0.25"
  "provisioned elastic k^0.7|provisioned|--elastic 0.25 --speedup-exponent 0.7"
  "fixed elastic linear ef|fixed|--elastic 0.25|ef"
  "fixed elastic k^0.7 ef|fixed|--elastic 0.25 --speedup-exponent 0.7|ef"
  "provisioned elastic linear ef|provisioned|--elastic 0.25|ef"
  "provisioned elastic k^0.7 ef|provisioned|--elastic 0.25 --speedup-exponent 0.7|ef"
)
# "ef": the same policy with [elastic] start = "earliest-finish".
for fleet in fixed provisioned; do
  sed 's/^grow = true/start = "earliest-finish"\ngrow = true/' "$dir/policy-$fleet.toml" > "$out/policy-$fleet-ef.toml"
  grep -q '^start = "earliest-finish"' "$out/policy-$fleet-ef.toml"
done
replay() {  # NAME FLEET VARIANT ARGS...: one replay's JSON into $out/NAME.json
  local name=$1 fleet=$2 policy=$dir/policy-$2.toml; shift 2
  [ "$1" = ef ] && policy=$out/policy-$fleet-ef.toml
  shift
  "$mlsim" --cluster "$dir/fleet-$fleet.toml" --policy "$policy" \
    --checkpoint-interval 1800 --boot-delay 120 --cost --json "$@" > "$out/$name.json"
}
for c in "${configs[@]}"; do
  IFS='|' read -r label fleet args variant <<< "$c"
  key=${label// /_}
  for w in 1 2 3 4 5 6 7 8; do
    for seed in 1 2 3; do
      # shellcheck disable=SC2086
      replay "pollux.$key.w$w.s$seed" "$fleet" "${variant:-}" --trace "$traces/pollux-workloads/workload-$w.csv" \
        --app-runtimes "$dir/apps.toml" --seed "$seed" $args
    done
  done
  # shellcheck disable=SC2086
  replay "philly.$key.s1" "$fleet" "${variant:-}" --trace "$traces/philly-2017-09-10.csv" --max-jobs "$philly_jobs" \
    --seed 1 $args
done
python3 - "$out" "$philly_jobs" "${configs[@]}" <<'PY'
import glob, json, os, sys
out, philly_jobs, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
labels = [c.split('|')[0] for c in configs]
def load(trace, label):
    rows = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, f"{trace}.{label.replace(' ', '_')}.*.json")))]
    def mean(k): return sum(r.get(k, 0) for r in rows) / len(rows)
    return {"n": len(rows), "jct": mean("mean_response_s") / 3600, "p95": mean("p95_response_s") / 3600,
            "wait95": mean("p95_wait_s") / 3600, "lost": mean("lost_resource_hours"), "cost": mean("cost"),
            "util": mean("utilization"), "resizes": mean("resizes"), "prov": mean("provisioned_node_hours"),
            "span": mean("makespan_s") / 3600, "unfinished": mean("unfinished"),
            "peak": max((p.get("peak_cost_per_hour", 0) for r in rows for p in r.get("pools", {}).values()), default=0)}
for trace, title in (("pollux", "Pollux workloads 1-8 x seeds 1-3 (means of 24 replays)"),
                     ("philly", f"Philly, first {philly_jobs} gangs, seed 1")):
    print(f"\n{title}")
    print(f"{'configuration':<31} {'mean JCT h':>10} {'p95 JCT h':>10} {'p95 wait h':>10} {'GPU-h lost':>10} "
          f"{'cost':>10} {'cost/h':>7} {'util':>6} {'resizes':>7} {'prov node-h':>11} {'peak prov/h':>11}")
    res = {l: load(trace, l) for l in labels}
    for l in labels:
        r = res[l]
        per_hour = r["cost"] / r["span"] if r["span"] > 0 else 0
        print(f"{l:<31} {r['jct']:>10.2f} {r['p95']:>10.2f} {r['wait95']:>10.2f} {r['lost']:>10.1f} "
              f"{r['cost']:>10.0f} {per_hour:>7.1f} {r['util']:>6.3f} {r['resizes']:>7.1f} {r['prov']:>11.1f} {r['peak']:>11.2f}")
    for fleet in ("fixed", "provisioned"):
        rigid = res[f"{fleet} rigid"]["jct"]
        for curve in ("linear", "k^0.7", "linear ef", "k^0.7 ef"):
            e = res[f"{fleet} elastic {curve}"]["jct"]
            # Against rigid jobs on the same fleet; with k^0.7 the rigid baseline is the same replay
            # (a rigid job always runs at its traced size, so the curve does not change it).
            change = e / rigid - 1
            print(f"goal 1 ({fleet}, {curve}): elastic mean JCT {change:+.1%} vs rigid -> "
                  f"{'met' if change <= -0.25 else 'not met'} (goal: -25 % or lower)")
    fixed, prov = res["fixed rigid"], res["provisioned rigid"]
    bound = 1.25 * fixed["wait95"]
    for l in ("provisioned rigid", "provisioned elastic linear", "provisioned elastic k^0.7"):
        r = res[l]
        ok_cost = r["cost"] <= fixed["cost"]
        ok_wait = r["wait95"] <= bound
        print(f"goal 2 ({l}): cost {r['cost']:.0f} vs fixed {fixed['cost']:.0f} ({'within' if ok_cost else 'over'}); "
              f"p95 wait {r['wait95']:.2f} h vs bound {bound:.2f} h = 1.25 x fixed rigid "
              f"({'met' if ok_wait else 'not met'})")
PY
