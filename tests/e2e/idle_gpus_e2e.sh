#!/usr/bin/env bash
# End to end (issue 34): the idle-GPU policy ([idle]) on the local cluster, jobs as nobody. Every
# agent has two "GPUs" whose utilization NVML reports from a file of its own
# (tests/agentd/fake_nvml.cc, "%n" = the node). Four jobs of 2 GPUs (a node each) run while their
# GPUs are busy (80 %) for longer than `after`: none is touched. Then three nodes' GPUs go idle:
#  - the default rule (notify): the job keeps running, an IDLE event, mlq's "(IDLE)" flag and
#    IDLE column, --json's idle_gpus, a warning line in its stderr written by its agent as nobody,
#    schedd's metrics (mlsched_idle_gpu_jobs, mlsched_idle_gpus, the action counter);
#  - [idle.partitions.batch] (cancel): CANCELLED, reason IdleGPUs, the warning in its stderr;
#  - [idle.qos.scavenger] (requeue): requeued (an IDLE event, reason IdleGPUs) and run again;
#  - the busy job is left alone (its GPUs count in mlsched_busy_gpus); busy again, the notified
#    job loses its flag.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=idle-gpus-e2e
command -v setpriv >/dev/null || { echo "$E2E_NAME: SKIPPED: setpriv is not installed"; exit 0; }
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs jobs as another user (agentd is root)"; exit 0; fi
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
POLICY="$MLSCHED_STATE/policy.toml"
cat "$ROOT/policies/default.toml" > "$POLICY"
cat >> "$POLICY" <<'TOML'

[[partitions]]
name = "batch"
default_time_limit = "1h"

[[qos]]
name = "scavenger"

[idle]
gpu_util_below = 5
after = "10s"
action = "notify"
requeue_grace = "5s"

[idle.partitions.batch]
action = "cancel"

[idle.qos.scavenger]
action = "requeue"
TOML
FAKE_NVML="$BIN/tests/agentd/libfake-nvml.so"
[ -f "$FAKE_NVML" ] || { echo "$E2E_NAME: SKIPPED: $FAKE_NVML is not built"; exit 0; }
gpus_at() {  # NODE PERCENT: both GPUs of NODE at PERCENT
  printf '0 %s 1000 80000000000\n1 %s 1000 80000000000\n' "$2" "$2" > "$MLSCHED_STATE/nvml-$1.tmp"
  mv "$MLSCHED_STATE/nvml-$1.tmp" "$MLSCHED_STATE/nvml-$1"
}
for n in od-1 od-2 spot-1 spot-2; do gpus_at "$n" 80; done
export MLSCHED_FAKE_NVML="$MLSCHED_STATE/nvml-%n" MLSCHED_AGENT_ARGS="--gpus test:2 --nvml-library $FAKE_NVML"
export MLSCHED_POLICY="$POLICY"
cluster_up
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
chmod a+x "$MLSCHED_STATE"
cd "$OUT"
sub() { setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlsub" --parsable -D "$OUT" -n 1 -c 1 --gpus-per-task 2 \
  --spot allow -t 10:00 -o "$OUT/%j.out" "$@" --wrap 'echo started; sleep 600'; }
notify=$(sub -J notify)
cancel=$(sub -J cancel -p batch)
requeue=$(sub -J requeue --qos scavenger)
busy=$(sub -J busy)
for j in $notify $cancel $requeue $busy; do wait_for "$j" RUNNING 30; done
node_of() { field "$1" %N; }
# Busy for 15 s, more than `after`: nothing happens to any of them.
sleep 15
for j in $notify $cancel $requeue $busy; do
  [ "$(field "$j" %T)" = RUNNING ] || fail "job $j was touched while its GPUs were busy: $(field "$j" %T) $(field "$j" %r)"
done
! grep -q "idle GPUs" "$MLSCHED_STATE/logs/schedd.log" || fail "a busy job was found idle: $(grep "idle GPUs" "$MLSCHED_STATE/logs/schedd.log")"
say "4 jobs of 2 GPUs each busy at 80 % for 15 s (after = 10s): none touched"

for j in $notify $cancel $requeue; do gpus_at "$(node_of "$j")" 0; done
requeue_node=$(node_of "$requeue")
wait_for "$cancel" CANCELLED 30
[ "$(field "$cancel" %r)" = IdleGPUs ] || fail "the batch job's reason is $(field "$cancel" %r), not IdleGPUs"
for _ in $(seq 1 100); do grep -q "mlsched: WARNING: job $notify holds 2 GPU(s) 0.0 % busy" "$OUT/$notify.out" 2>/dev/null && break; sleep 0.2; done
grep -q "mlsched: WARNING: job $notify holds 2 GPU(s) 0.0 % busy (below 5.0 %) for 1[0-9]s; policy \[idle\] action notify" "$OUT/$notify.out" ||
  fail "no warning in the notified job's output: $(cat "$OUT/$notify.out")"
[ "$(stat -c %U "$OUT/$notify.out")" = nobody ] || fail "the job's output is not nobody's any more"
grep -q "mlsched: WARNING: job $cancel holds .*: cancelled now" "$OUT/$cancel.out" || fail "no warning in the cancelled job's output: $(cat "$OUT/$cancel.out")"
[ "$(field "$notify" %T)" = RUNNING ] || fail "the notified job is $(field "$notify" %T)"
"$BIN/cli/mlq" -j "$notify" -h | qgrep "(IDLE)" || fail "mlq shows no IDLE flag: $("$BIN/cli/mlq" -j "$notify")"
"$BIN/cli/mlq" -j "$notify" -h -o "%X" | qgrep "^[0-9:]*:0.0%$" || fail "mlq's IDLE column: $("$BIN/cli/mlq" -j "$notify" -h -o "%X")"
"$BIN/cli/mlq" -j "$notify" --json | qgrep '"idle_gpus":{"gpu_util_percent":0.0,"since":[0-9]*}' || fail "mlq --json has no idle_gpus: $("$BIN/cli/mlq" -j "$notify" --json)"
"$BIN/cli/mlq" -j "$busy" -h | qgrep -v "(IDLE)" || fail "the busy job is flagged"
say "idle: job $notify notified (RUNNING, mlq (IDLE), a warning in its output), job $cancel CANCELLED (IdleGPUs)"

# The scavenger job: requeued (its restart may land on an idle node and be requeued again).
DB="$MLSCHED_STATE/db/state.db"
events_of() { sqlite3 -readonly -separator '|' "$DB" "SELECT kind, detail FROM events WHERE job_id = $1 ORDER BY id"; }
for _ in $(seq 1 150); do events_of "$requeue" | qgrep "^IDLE|" && break; sleep 0.2; done
events_of "$requeue" | qgrep "^IDLE|2 GPU(s) 0.0 % busy (below 5.0 %) for 1[0-9]s; policy \[idle\] action requeue$" ||
  fail "no IDLE event of the requeued job: $(events_of "$requeue")"
events_of "$notify" | qgrep "^IDLE|.*action notify$" || fail "no IDLE event of the notified job: $(events_of "$notify")"
! events_of "$busy" | qgrep "^IDLE" || fail "the busy job has an IDLE event"
for _ in $(seq 1 150); do [ "$("$BIN/cli/mlacct" -j "$requeue" -n -P -o Attempts 2>/dev/null | sed -n 1p)" -ge 2 ] 2>/dev/null && break; sleep 0.2; done
attempts=$("$BIN/cli/mlacct" -j "$requeue" -n -P -o Attempts | sed -n 1p)
[ "${attempts:-0}" -ge 2 ] || fail "the scavenger job was not requeued and run again (attempts: $attempts)"
"$BIN/cli/mlcancel" "$requeue"
gpus_at "$requeue_node" 80
say "idle: job $requeue (QoS scavenger) requeued after its GPUs idled and ran again ($attempts attempts)"

metrics=$(curl -sf "$MLSCHED_METRICS_URL")
echo "$metrics" | qgrep '^mlsched_idle_gpu_jobs 1$' || fail "mlsched_idle_gpu_jobs: $(echo "$metrics" | grep idle_gpu)"
echo "$metrics" | qgrep '^mlsched_idle_gpus 2$' || fail "mlsched_idle_gpus: $(echo "$metrics" | grep idle_gpus)"
echo "$metrics" | qgrep '^mlsched_idle_gpu_actions_total{action="notify"} 1$' || fail "notify count: $(echo "$metrics" | grep actions)"
echo "$metrics" | qgrep '^mlsched_idle_gpu_actions_total{action="cancel"} 1$' || fail "cancel count: $(echo "$metrics" | grep actions)"
busy_gpus=$(echo "$metrics" | awk '/^mlsched_busy_gpus/ {s += $2} END {print s + 0}')
awk -v b="$busy_gpus" 'BEGIN {exit !(b >= 1.5 && b <= 1.7)}' || fail "mlsched_busy_gpus sums to $busy_gpus, not the busy job's 2 x 0.8"
say "metrics: 1 idle job holding 2 GPUs, the actions counted, busy GPUs $busy_gpus (the busy job's 2 at 80 %)"

# The dashboard and alert rules (deploy/): every metric name their PromQL uses is exported by
# schedd or an agent (no dead panel), and promtool accepts the rules.
agent_url=$(grep -o 'metrics on http://[^ ]*' "$MLSCHED_STATE/logs/agent-od-1.log" | tail -1 | cut -d' ' -f3)
echo "$metrics" > "$MLSCHED_STATE/schedd.prom"
curl -sf "$agent_url" > "$MLSCHED_STATE/agent.prom" || fail "no agent metrics at $agent_url"
grep -q '^mlsched_agent_gpu_utilization_percent{' "$MLSCHED_STATE/agent.prom" || fail "the agent exports no GPU utilization"
checked=$(python3 "$ROOT/tests/e2e/dashboard_metrics.py" "$ROOT/deploy/grafana/mlsched.json" "$ROOT/deploy/prometheus/mlsched-alerts.yml" \
  "$MLSCHED_STATE/schedd.prom" "$MLSCHED_STATE/agent.prom" 2>&1) || fail "$checked"
if command -v promtool >/dev/null; then
  promtool check rules "$ROOT/deploy/prometheus/mlsched-alerts.yml" >/dev/null 2>"$MLSCHED_STATE/promtool.err" ||
    fail "promtool: $(cat "$MLSCHED_STATE/promtool.err")"
  checked="$checked; promtool check rules passed"
fi
say "dashboard and alerts: $checked"

# Busy again: the flag goes.
gpus_at "$(node_of "$notify")" 90
for _ in $(seq 1 50); do "$BIN/cli/mlq" -j "$notify" -h | qgrep "(IDLE)" || break; sleep 0.2; done
! "$BIN/cli/mlq" -j "$notify" -h | qgrep "(IDLE)" || fail "the flag stayed after the GPUs were busy again"
[ "$(field "$busy" %T)" = RUNNING ] || fail "the busy job is $(field "$busy" %T)"
"$BIN/cli/mlcancel" "$notify" "$busy"
say "busy again: job $notify lost its IDLE flag; the busy job ran untouched throughout"
