#!/usr/bin/env bash
# GPU acceptance check of mltrain's CUDA path, for a machine with NVIDIA GPUs (the path was written
# and compiled without one). Builds what it needs (if needed), then runs:
#   1. the engine unit tests: CUDA engine against the CPU engine (trainer_unit_tests "[engine]");
#   2. the NCCL all-reduce benchmark over all visible GPUs (one process per GPU, 1 MiB..1 GiB);
#   3. Fashion-MNIST in bf16 on 1 GPU, and 4. on all N GPUs (accuracy, samples/s from --metrics-out);
#   5. a SIGTERM mid-run on N GPUs: every rank exits 75 with a committed checkpoint (file://);
#   6. a resume of that checkpoint on a different GPU count (1 GPU; the CPU when N is 1) that goes on
#      from the checkpoint step.
# Prints a summary table; exits 0 when every check passed, 1 when one failed, 2 without a GPU.
#
# Environment (all optional):
#   MLSCHED_BUILD_DIR   build directory (default build-cuda; configured with -DMLSCHED_WITH_CUDA=ON
#                       -DMLSCHED_BUILD_DAEMONS=OFF when it has no build.ninja yet); MLSCHED_JOBS (nproc)
#   GPU_CHECK_BIN_DIR   a directory holding mltrain, trainer_unit_tests and nccl_allreduce_bench built
#                       elsewhere with the CUDA path (say, on a build machine without a GPU); when set,
#                       nothing is built and MLSCHED_BUILD_DIR is not read
#   GPU_CHECK_DIR       where logs, metrics and checkpoints go (default: a new /tmp directory)
#   GPU_CHECK_EPOCHS    epochs of the accuracy runs (20), GPU_CHECK_TARGET_ACC (0.885)
#   GPU_CHECK_BENCH_MAX_MIB  largest all-reduce (1024), GPU_CHECK_TIMEOUT_S per run (900)
#   GPU_CHECK_DEVICE    cuda; "cpu" runs the mltrain checks on the CPU (tests this script's own
#                       launch/SIGTERM/resume logic; the GPU count still comes from nvidia-smi)
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD_DIR="${MLSCHED_BUILD_DIR:-$ROOT/build-cuda}"
EPOCHS="${GPU_CHECK_EPOCHS:-20}"
TARGET_ACC="${GPU_CHECK_TARGET_ACC:-0.885}"
BENCH_MAX_MIB="${GPU_CHECK_BENCH_MAX_MIB:-1024}"
RUN_TIMEOUT_S="${GPU_CHECK_TIMEOUT_S:-900}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"

# ---- GPUs: nvidia-smi's count, narrowed by CUDA_VISIBLE_DEVICES when that is set ----
count_gpus() {
  local n=0
  command -v nvidia-smi >/dev/null 2>&1 && n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
    local listed
    listed=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c '^[0-9A-Za-z]')
    case "$CUDA_VISIBLE_DEVICES" in -1* | none | NoDevFiles) listed=0 ;; esac
    [ "$listed" -lt "$n" ] && n=$listed
  fi
  echo "$n"
}
GPUS=$(count_gpus)
if [ "$GPUS" -lt 1 ]; then
  echo "gpu_check: no CUDA device visible (nvidia-smi -L lists none, or CUDA_VISIBLE_DEVICES hides them)" >&2
  exit 2
fi

WORK="${GPU_CHECK_DIR:-$(mktemp -d /tmp/mltrain-gpu-check.XXXXXX)}"
mkdir -p "$WORK"
echo "gpu_check: $GPUS GPU(s); binaries from ${GPU_CHECK_BIN_DIR:-$BUILD_DIR}; logs in $WORK"

# ---- build (ninja does nothing when up to date) ----
if [ -n "${GPU_CHECK_BIN_DIR:-}" ]; then
  MLTRAIN="$GPU_CHECK_BIN_DIR/mltrain" BENCH="$GPU_CHECK_BIN_DIR/nccl_allreduce_bench"
  UNIT="$GPU_CHECK_BIN_DIR/trainer_unit_tests"
  for bin in "$MLTRAIN" "$BENCH" "$UNIT"; do
    [ -x "$bin" ] || { echo "gpu_check: GPU_CHECK_BIN_DIR has no executable $(basename "$bin")" >&2; exit 1; }
  done
else
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -G Ninja -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLSCHED_WITH_CUDA=ON \
      -DMLSCHED_BUILD_DAEMONS=OFF || { echo "gpu_check: cmake failed" >&2; exit 1; }
  fi
  JOBS=(-j"${MLSCHED_JOBS:-$(nproc)}")
  ninja -C "$BUILD_DIR" "${JOBS[@]}" mltrain trainer_unit_tests || { echo "gpu_check: build failed" >&2; exit 1; }
  if ! ninja -C "$BUILD_DIR" "${JOBS[@]}" nccl_allreduce_bench; then
    echo "gpu_check: no nccl_allreduce_bench target: this build has no CUDA path (see cmake's 'mltrain: ...' line)" >&2
    exit 1
  fi
  MLTRAIN="$BUILD_DIR/trainer/mltrain"
  BENCH="$BUILD_DIR/bench/trainer/nccl_allreduce_bench"
  UNIT="$BUILD_DIR/tests/trainer/trainer_unit_tests"
fi

# ---- helpers ----
NAMES=() RESULTS=() DETAILS=()
record() {  # record NAME PASS|FAIL|SKIP DETAIL
  NAMES+=("$1") RESULTS+=("$2") DETAILS+=("$3")
  echo "gpu_check: [$2] $1: $3"
}
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  else
    echo $((20000 + RANDOM % 20000))
  fi
}
json_value() {  # json_value FILE KEY: a number (or true/false) of mltrain's metrics/status JSON
  sed -n "s/.*\"$2\": *\([-0-9.eE+a-z]*\).*/\1/p" "$1" 2>/dev/null | head -n 1
}
ATTEMPT=0
# launch WORLD PREFIX CMD...: WORLD ranks of CMD with the torchrun-style environment mltrain reads
# (trainer/communicator.h ReadRendezvousEnv); rank r on GPU r. Sets PIDS; logs to PREFIX.r.log.
launch() {
  local world=$1 prefix=$2 port token r
  shift 2
  port=$(free_port)
  token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')  # 64 hex digits, as agentd's
  ATTEMPT=$((ATTEMPT + 1))
  PIDS=()
  for ((r = 0; r < world; r++)); do
    rm -f "$prefix.$r.status.json"  # a stale one from an earlier run in GPU_CHECK_DIR would be read as progress
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      MLSCHED_RENDEZVOUS_TOKEN=$token MLSCHED_JOB_ID=gpu-check MLSCHED_ATTEMPT=$ATTEMPT \
      MLSCHED_STATUS_FILE="$prefix.$r.status.json" "$@" >"$prefix.$r.log" 2>&1 &
    PIDS+=($!)
  done
}
# wait_all: waits for PIDS (SIGKILL after RUN_TIMEOUT_S, code 124); sets CODES ("0 0 ...").
wait_all() {
  local deadline=$((SECONDS + RUN_TIMEOUT_S)) pid alive codes=()
  while :; do
    alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    if [ $SECONDS -ge $deadline ]; then
      for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
      break
    fi
    sleep 0.2
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid"
    codes+=($?)
  done
  CODES="${codes[*]}"
}
all_codes() {  # all_codes N CODE: "CODE CODE ..." N times
  local out=() i
  for ((i = 0; i < $1; i++)); do out+=("$2"); done
  echo "${out[*]}"
}

# ---- 1. engine unit tests (CUDA against CPU) ----
if "$UNIT" "[engine]" >"$WORK/unit.log" 2>&1; then
  record "engine unit tests (CUDA vs CPU)" PASS "$(grep -E 'All tests passed|test cases' "$WORK/unit.log" | tail -n 1)"
else
  record "engine unit tests (CUDA vs CPU)" FAIL "see $WORK/unit.log"
fi

# ---- 2. NCCL all-reduce over all GPUs ----
launch "$GPUS" "$WORK/nccl" "$BENCH" "$BENCH_MAX_MIB"
wait_all
if [ "$CODES" = "$(all_codes "$GPUS" 0)" ] && grep -q "sum check passed" "$WORK/nccl.0.log"; then
  last=$(awk '$1 ~ /^[0-9]+$/ {line = $0} END {print line}' "$WORK/nccl.0.log")
  if [ "$GPUS" -ge 2 ]; then
    record "NCCL all-reduce, $GPUS GPU(s)" PASS "$(echo "$last" | awk '{printf "%s MiB: algbw %s GB/s, busbw %s GB/s", $1, $3, $4}')"
  else
    record "NCCL all-reduce, 1 GPU" PASS "NCCL init, sum check and the call path only (one rank exchanges nothing)"
  fi
  sed 's/^/    /' "$WORK/nccl.0.log"
else
  record "NCCL all-reduce, $GPUS GPU(s)" FAIL "exit codes $CODES; see $WORK/nccl.*.log"
fi

# ---- 3./4. Fashion-MNIST in bf16 on 1 and on N GPUs ----
fmnist() {  # fmnist WORLD
  local world=$1 m="$WORK/fmnist$1.metrics.json" acc sps wall
  launch "$world" "$WORK/fmnist$world" "$MLTRAIN" --device "$DEVICE" --precision bf16 --epochs "$EPOCHS" --metrics-out "$m"
  wait_all
  acc=$(json_value "$m" test_accuracy)
  sps=$(json_value "$m" samples_per_s)
  wall=$(json_value "$m" wall_s)
  if [ "$CODES" != "$(all_codes "$world" 0)" ] || [ -z "$acc" ]; then
    record "fmnist bf16, $world GPU(s)" FAIL "exit codes $CODES; see $WORK/fmnist$world.*.log"
  elif awk -v a="$acc" -v t="$TARGET_ACC" 'BEGIN {exit !(a >= t)}'; then
    record "fmnist bf16, $world GPU(s)" PASS "test accuracy $acc (>= $TARGET_ACC), $(printf '%.0f' "$sps") samples/s, wall $(printf '%.1f' "$wall") s"
  else
    record "fmnist bf16, $world GPU(s)" FAIL "test accuracy $acc < $TARGET_ACC ($(printf '%.0f' "$sps") samples/s)"
  fi
}
fmnist 1
if [ "$GPUS" -ge 2 ]; then fmnist "$GPUS"; else record "fmnist bf16, N GPUs" SKIP "only 1 GPU visible"; fi

# ---- 5. SIGTERM mid-run: exit 75 everywhere, committed checkpoint ----
CKPT="$WORK/ckpt"
rm -rf "$CKPT"
LONG=(--device "$DEVICE" --precision bf16 --epochs 200 --checkpoint-url "file://$CKPT" --checkpoint-every 500 --log-every 50)
launch "$GPUS" "$WORK/sigterm" "$MLTRAIN" "${LONG[@]}"
deadline=$((SECONDS + 120))
step=0
while [ $SECONDS -lt $deadline ] && kill -0 "${PIDS[0]}" 2>/dev/null; do
  step=$(json_value "$WORK/sigterm.0.status.json" step)
  [ "${step:-0}" -ge 700 ] && break
  sleep 0.1
done
kill -TERM "${PIDS[0]}" 2>/dev/null
wait_all
STOP_STEP=""
[ -f "$CKPT/LATEST" ] && STOP_STEP=$(sed -n 's/^step-\([0-9]*\)$/\1/p' "$CKPT/LATEST")
if [ "$CODES" = "$(all_codes "$GPUS" 75)" ] && [ -n "$STOP_STEP" ] && [ -f "$CKPT/step-$STOP_STEP/manifest.json" ]; then
  record "SIGTERM at step ~${step:-?}, $GPUS GPU(s)" PASS "every rank exited 75; committed $CKPT/step-$STOP_STEP"
else
  record "SIGTERM at step ~${step:-?}, $GPUS GPU(s)" FAIL "exit codes $CODES (want 75), LATEST '${STOP_STEP}'; see $WORK/sigterm.*.log"
  STOP_STEP=""
fi

# ---- 6. resume on a different GPU count ----
if [ -z "$STOP_STEP" ]; then
  record "resume on another GPU count" SKIP "no checkpoint from the SIGTERM run"
else
  if [ "$GPUS" -ge 2 ]; then
    RESUME_WORLD=1 RESUME_DEVICE=$DEVICE RESUME_WHAT="$GPUS -> 1 GPU"
  else
    RESUME_WORLD=1 RESUME_DEVICE=cpu RESUME_WHAT="1 GPU -> CPU"
  fi
  END_STEP=$((STOP_STEP + 100))
  rm -f "$WORK/resume.loss"
  launch "$RESUME_WORLD" "$WORK/resume" "$MLTRAIN" "${LONG[@]}" --device "$RESUME_DEVICE" --max-steps "$END_STEP" \
    --metrics-out "$WORK/resume.metrics.json" --loss-log "$WORK/resume.loss"
  wait_all
  first=$(awk 'NR == 1 {print $1}' "$WORK/resume.loss" 2>/dev/null)
  steps=$(json_value "$WORK/resume.metrics.json" steps)
  if [ "$CODES" = "0" ] && grep -q "resumed from .*/step-$STOP_STEP on " "$WORK/resume.0.log" &&
    [ "$first" = "$((STOP_STEP + 1))" ] && [ "$steps" = "$END_STEP" ]; then
    record "resume $RESUME_WHAT" PASS "resumed from step $STOP_STEP, trained steps $first..$steps"
  else
    record "resume $RESUME_WHAT" FAIL "exit $CODES, first step '${first}', last '${steps}' (want $((STOP_STEP + 1))..$END_STEP); see $WORK/resume.0.log"
  fi
fi

# ---- summary ----
echo
printf '%-40s %-6s %s\n' "check" "result" "detail"
printf '%-40s %-6s %s\n' "-----" "------" "------"
failed=0
for i in "${!NAMES[@]}"; do
  printf '%-40s %-6s %s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${DETAILS[$i]}"
  [ "${RESULTS[$i]}" = FAIL ] && failed=1
done
echo "logs: $WORK"
exit $failed
