#!/usr/bin/env bash
# A local mlsched cluster on loopback: one schedd (SQLite state, policies/default.toml, Prometheus
# metrics), four agents (2 on-demand, 2 spot, in two topology domains) and an object store for
# checkpoints (s3rver from tools/s3 when node and its modules are there, else a directory through
# file://), all in one state directory.
#   scripts/local-cluster.sh up|down|status
# `up` writes $MLSCHED_STATE/env.sh: source it to get MLSCHED_SERVER, the checkpoint URL and the
# S3 credentials (MLSCHED_CHECKPOINT_URL, AWS_*) and the metrics address (MLSCHED_METRICS_URL).
# Environment: MLSCHED_STATE (default ./.state), MLSCHED_BUILD_DIR (default ./build),
# AGENT_CPUS (CPUs per agent, default 2), MLSCHED_POLICY (default policies/default.toml),
# MLSCHED_OBJECT_STORE (s3 | dir; default s3 when available).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="${MLSCHED_STATE:-$PWD/.state}"
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
SOCK="$STATE/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
AGENT_CPUS="${AGENT_CPUS:-2}"
POLICY="${MLSCHED_POLICY:-$PWD/policies/default.toml}"

start() {  # name, log, command...
  local name=$1 log=$2; shift 2
  setsid "$@" >>"$log" 2>&1 < /dev/null &
  echo $! > "$STATE/pids/$name"
}

up() {
  mkdir -p "$STATE/pids" "$STATE/logs"
  if [ -f "$STATE/pids/schedd" ] && kill -0 "$(cat "$STATE/pids/schedd")" 2>/dev/null; then
    echo "local cluster already up (MLSCHED_SERVER=$MLSCHED_SERVER)"; return 0
  fi
  : > "$STATE/env.sh"
  echo "export MLSCHED_SERVER=$MLSCHED_SERVER" >> "$STATE/env.sh"
  object_store
  start schedd "$STATE/logs/schedd.log" "$BIN/schedd/server/schedd" --listen "unix:$SOCK" \
    --state-dir "$STATE/db" --policy "$POLICY" --metrics-port 0 \
    --heartbeat-interval 1 --heartbeat-timeout 6 --kill-grace 20
  for i in $(seq 1 50); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.2; done
  "$BIN/cli/mlq" >/dev/null || { echo "schedd did not start; see $STATE/logs/schedd.log" >&2; tail -5 "$STATE/logs/schedd.log" >&2; exit 1; }
  local url
  url=$(grep -o 'metrics on http://[^ ]*' "$STATE/logs/schedd.log" | tail -1 | cut -d' ' -f3)
  echo "export MLSCHED_METRICS_URL=$url" >> "$STATE/env.sh"
  local n=0
  for spec in "od-1 on-demand rack-a" "od-2 on-demand rack-b" "spot-1 spot rack-a" "spot-2 spot rack-b"; do
    set -- $spec
    mkdir -p "$STATE/agents/$1"
    start "agent-$1" "$STATE/logs/agent-$1.log" "$BIN/agentd/agentd" --server "unix:$SOCK" --name "$1" \
      --pool "$2" --domain "$3" --zone local-a --region local --cpus "$AGENT_CPUS" --mem 4G \
      --work-dir "$STATE/agents/$1" --address 127.0.0.1 --metrics-port 0
    n=$((n + 1))
  done
  for i in $(seq 1 50); do
    [ "$("$BIN/cli/mladmin" nodes --json 2>/dev/null | grep -o '"name"' | wc -l)" -ge "$n" ] && break
    sleep 0.2
  done
  echo "local cluster up: source $STATE/env.sh (MLSCHED_SERVER=$MLSCHED_SERVER)"
}

# Starts the checkpoint object store and records its URL and credentials in env.sh.
object_store() {
  local mode="${MLSCHED_OBJECT_STORE:-s3}"
  if [ "$mode" = s3 ] && command -v node >/dev/null && [ -d tools/s3/node_modules/s3rver ]; then
    mkdir -p "$STATE/s3"
    start s3 "$STATE/logs/s3.log" node tools/s3/s3-test-server.js "$STATE/s3" checkpoints S3RVER S3RVER us-east-1
    local port=""
    for i in $(seq 1 100); do
      port=$(grep -o '^READY [0-9]*' "$STATE/logs/s3.log" 2>/dev/null | cut -d' ' -f2 || true)
      [ -n "$port" ] && break; sleep 0.1
    done
    [ -n "$port" ] || { echo "object store did not start; see $STATE/logs/s3.log" >&2; exit 1; }
    cat >> "$STATE/env.sh" <<ENV
export MLSCHED_CHECKPOINT_URL=s3://checkpoints
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=S3RVER
export AWS_SECRET_ACCESS_KEY=S3RVER
ENV
    echo "object store: s3rver on 127.0.0.1:$port, bucket 'checkpoints'"
  else
    mkdir -p "$STATE/objects"
    echo "export MLSCHED_CHECKPOINT_URL=file://$STATE/objects" >> "$STATE/env.sh"
    echo "object store: directory $STATE/objects (file://)"
  fi
}

down() {
  [ -d "$STATE/pids" ] || { echo "local cluster is not running"; return 0; }
  for f in "$STATE"/pids/agent-* "$STATE/pids/schedd" "$STATE/pids/s3"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
  echo "local cluster down"
}

status() {
  for f in "$STATE"/pids/*; do
    [ -f "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$(basename "$f"): running (pid $(cat "$f"))";
    else echo "$(basename "$f"): dead"; fi
  done
  "$BIN/cli/mladmin" nodes 2>/dev/null || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
