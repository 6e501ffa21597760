#!/usr/bin/env bash
# A local mlsched cluster on loopback: one schedd (SQLite state) and four agents (2 on-demand,
# 2 spot, in two topology domains), all in one state directory.
#   scripts/local-cluster.sh up|down|status
# Environment: MLSCHED_STATE (default ./.state), MLSCHED_BUILD_DIR (default ./build),
# AGENT_CPUS (CPUs per agent, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
STATE="${MLSCHED_STATE:-$PWD/.state}"
BIN="${MLSCHED_BUILD_DIR:-$PWD/build}"
SOCK="$STATE/schedd.sock"
export MLSCHED_SERVER="unix:$SOCK"
AGENT_CPUS="${AGENT_CPUS:-2}"

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
  start schedd "$STATE/logs/schedd.log" "$BIN/schedd/server/schedd" --listen "unix:$SOCK" \
    --state-dir "$STATE/db" --heartbeat-interval 1 --heartbeat-timeout 6 --kill-grace 20
  for i in $(seq 1 50); do "$BIN/cli/mlq" >/dev/null 2>&1 && break; sleep 0.2; done
  local n=0
  for spec in "od-1 on-demand rack-a" "od-2 on-demand rack-b" "spot-1 spot rack-a" "spot-2 spot rack-b"; do
    set -- $spec
    mkdir -p "$STATE/agents/$1"
    start "agent-$1" "$STATE/logs/agent-$1.log" "$BIN/agentd/agentd" --server "unix:$SOCK" --name "$1" \
      --pool "$2" --domain "$3" --zone local-a --region local --cpus "$AGENT_CPUS" --mem 4G \
      --work-dir "$STATE/agents/$1" --address 127.0.0.1
    n=$((n + 1))
  done
  for i in $(seq 1 50); do
    [ "$("$BIN/cli/mladmin" nodes --json 2>/dev/null | grep -o '"name"' | wc -l)" -ge "$n" ] && break
    sleep 0.2
  done
  echo "local cluster up: export MLSCHED_SERVER=$MLSCHED_SERVER"
}

down() {
  [ -d "$STATE/pids" ] || { echo "local cluster is not running"; return 0; }
  for f in "$STATE"/pids/agent-* "$STATE/pids/schedd"; do
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
