#!/usr/bin/env bash
# The local cluster's provisioning programs (policy [provisioning.POOL] resume_program and
# suspend_program, like Slurm's ResumeProgram/SuspendProgram): schedd runs them with one argument,
# a hostlist of node names, and the node shape in MLSCHED_PROVISION_* (policies/README.md).
#   scripts/local-provision-resume HOSTLIST   (a link to this script, or: local-provision.sh resume HOSTLIST)
#   scripts/local-provision.sh resume|suspend HOSTLIST
# resume starts one agentd per name on loopback, as scripts/local-cluster.sh starts its agents (a
# node certificate from the cluster CA made by scripts/mlsched-certs.sh, pid in
# $MLSCHED_STATE/pids/agent-NAME, log in $MLSCHED_STATE/logs/agent-NAME.log); suspend stops them
# (SIGTERM, SIGKILL after 10 s). A name listed in $MLSCHED_STATE/provision-never-start (one per
# line) is not started: a cloud that never delivers the machine, for tests of resume_timeout.
# Environment: MLSCHED_STATE (default ./.state) and MLSCHED_BUILD_DIR (default ./build), which
# schedd inherits from scripts/local-cluster.sh; MLSCHED_SERVER etc. come from $MLSCHED_STATE/env.sh.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
STATE="${MLSCHED_STATE:-$PWD/.state}"
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
MAX_NODES=256  # names one call may carry

case "$(basename "$0")" in
  *-resume) action=resume ;;
  *-suspend) action=suspend ;;
  *) action=${1:-}; shift || true ;;
esac
hostlist=${1:-}
[ "$action" = resume ] || [ "$action" = suspend ] || { sed -n '2,14p' "$0" >&2; exit 2; }
[ -n "$hostlist" ] || { echo "local-provision: no hostlist" >&2; exit 2; }

# Slurm hostlist -> one name per line: "spot-p[1-3,7],od-x" (ranges keep their zero-padding).
expand() {
  awk -v s="$1" 'BEGIN {
    n = 0; depth = 0; tok = ""
    for (i = 1; i <= length(s); i++) {
      c = substr(s, i, 1)
      if (c == "[") depth++
      if (c == "]") depth--
      if (c == "," && depth == 0) { toks[n++] = tok; tok = "" } else tok = tok c
    }
    toks[n++] = tok
    for (k = 0; k < n; k++) {
      t = toks[k]
      if (match(t, /\[[^]]*\]/)) {
        pre = substr(t, 1, RSTART - 1); post = substr(t, RSTART + RLENGTH)
        m = split(substr(t, RSTART + 1, RLENGTH - 2), parts, ",")
        for (p = 1; p <= m; p++) {
          if (split(parts[p], lohi, "-") == 2) {
            w = length(lohi[1])
            for (v = lohi[1] + 0; v <= lohi[2] + 0; v++) printf "%s%0" w "d%s\n", pre, v, post
          } else print pre parts[p] post
        }
      } else if (t != "") print t
    }
  }'
}

mapfile -t names < <(expand "$hostlist")
[ "${#names[@]}" -le "$MAX_NODES" ] || { echo "local-provision: more than $MAX_NODES names" >&2; exit 2; }
for n in "${names[@]}"; do
  [[ "$n" =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || { echo "local-provision: bad node name '$n'" >&2; exit 2; }
done
[ -f "$STATE/env.sh" ] && source "$STATE/env.sh"
mkdir -p "$STATE/pids" "$STATE/logs"

resume() {
  local n=$1
  if [ -f "$STATE/provision-never-start" ] && grep -qx "$n" "$STATE/provision-never-start"; then
    echo "local-provision: $n never starts (listed in provision-never-start)"; return 0
  fi
  if [ -f "$STATE/pids/agent-$n" ] && kill -0 "$(cat "$STATE/pids/agent-$n")" 2>/dev/null; then
    echo "local-provision: $n already running"; return 0
  fi
  [ -f "$STATE/tls/nodes/$n.pem" ] || bash scripts/mlsched-certs.sh "$STATE/tls" node "$n" >/dev/null
  mkdir -p "$STATE/agents/$n"
  local gpus=${MLSCHED_PROVISION_GPUS:-none} root_jobs=()
  [ "${MLSCHED_PROVISION_ROOT_JOBS:-0}" = 1 ] && root_jobs=(--allow-root-jobs)  # the pool's root_jobs = true
  setsid "$BIN/agentd/agentd" --server "$MLSCHED_SERVER" --name "$n" \
    --tls-cert "$STATE/tls/nodes/$n.pem" --tls-key "$STATE/tls/nodes/$n.key" --tls-ca "$STATE/tls/ca.pem" \
    --pool "${MLSCHED_PROVISION_POOL:-on-demand}" --cpus "${MLSCHED_PROVISION_CPUS:-2}" \
    --mem "${MLSCHED_PROVISION_MEMORY:-4096}" --gpus "$gpus" \
    --domain "${MLSCHED_PROVISION_DOMAIN:-}" --zone "${MLSCHED_PROVISION_ZONE:-}" --region "${MLSCHED_PROVISION_REGION:-}" \
    --work-dir "$STATE/agents/$n" --address 127.0.0.1 --metrics-port 0 "${root_jobs[@]}" ${MLSCHED_AGENT_ARGS:-} \
    >>"$STATE/logs/agent-$n.log" 2>&1 </dev/null &
  echo $! > "$STATE/pids/agent-$n"
  disown
  echo "local-provision: started agentd $n (pid $!)"
}

suspend() {
  local n=$1 pid
  [ -f "$STATE/pids/agent-$n" ] || { echo "local-provision: $n is not running"; return 0; }
  pid=$(cat "$STATE/pids/agent-$n")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$STATE/pids/agent-$n"
  echo "local-provision: stopped agentd $n"
}

for n in "${names[@]}"; do "$action" "$n"; done
