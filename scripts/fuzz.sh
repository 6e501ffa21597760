#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang-14 (ASan + UBSan) in build-fuzz/ and runs each
# for SECONDS (default 20) from its seed corpus, one target per CPU at a time, each with one job.
#   scripts/fuzz.sh [--build-only | --no-build] [SECONDS] [TARGET...]
#   e.g. scripts/fuzz.sh 20; scripts/fuzz.sh 600 policy
# --build-only configures and builds the targets and runs none; --no-build runs targets built
# before (ctest's "fuzz:" entries: one fixture builds, then each target is a test of its own).
# New inputs go to build-fuzz/corpus/TARGET (fuzz/corpus/ is only read), crash reproducers to
# build-fuzz/crashes/TARGET/, each run's log to build-fuzz/logs/TARGET.log. Prints executions,
# executions/s and coverage per target; exits 1 when any target crashed. Without clang++-14 or its
# fuzzer runtime (Debian: clang-14, libclang-rt-14-dev) it says so and exits 0.
# Environment: MLSCHED_FUZZ_BUILD_DIR (build-fuzz), MLSCHED_FUZZ_JOBS (build jobs, nproc),
# MLSCHED_FUZZ_PARALLEL (targets run at once, nproc),
# MLSCHED_FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=all
case "${1:-}" in --build-only) mode=build; shift ;; --no-build) mode=run; shift ;; esac
SECS="${1:-20}"
[ $# -gt 0 ] && shift
case "$SECS" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [--build-only | --no-build] [SECONDS] [TARGET...]" >&2; exit 2 ;; esac
if [ "$mode" != build ] && [ "$SECS" = 0 ]; then
  echo "fuzz.sh: 0 seconds: skipping the fuzz pass"
  exit 0
fi
BUILD_DIR="${MLSCHED_FUZZ_BUILD_DIR:-build-fuzz}"
CC_BIN=clang-14
CXX_BIN=clang++-14

# Exits 0 with a note (the pass is skipped) when clang-14 cannot build fuzzers here.
need_toolchain() {
  if ! command -v "$CXX_BIN" >/dev/null 2>&1; then
    echo "fuzz.sh: $CXX_BIN not found; skipping the fuzz pass (install clang-14 and libclang-rt-14-dev)"
    exit 0
  fi
  local probe_dir
  probe_dir="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe_dir/probe.cc"
  if ! "$CXX_BIN" -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cc" -o "$probe_dir/probe" >/dev/null 2>&1; then
    rm -rf "$probe_dir"
    echo "fuzz.sh: $CXX_BIN cannot link -fsanitize=fuzzer,address,undefined (libclang-rt-14-dev missing?); skipping the fuzz pass"
    exit 0
  fi
  rm -rf "$probe_dir"
}

start=$(date +%s)
targets=("$@")
if [ "$mode" = run ]; then
  for t in "${targets[@]}"; do
    if [ ! -x "$BUILD_DIR/fuzz/${t}_fuzz" ]; then
      need_toolchain  # not built because the toolchain is missing: skipped as the build was
      echo "fuzz.sh: $BUILD_DIR/fuzz/${t}_fuzz is not built (scripts/fuzz.sh --build-only)" >&2
      exit 1
    fi
  done
else
  need_toolchain
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    CC="$CC_BIN" CXX="$CXX_BIN" cmake -G Ninja -S . -B "$BUILD_DIR" -DMLSCHED_FUZZ=ON -DMLSCHED_WERROR=ON >/dev/null
  fi
  if [ ${#targets[@]} -eq 0 ]; then
    ninja -C "$BUILD_DIR" build.ninja >/dev/null  # re-runs CMake when fuzz/CMakeLists.txt changed
    read -r -a targets <"$BUILD_DIR/fuzz_targets.txt"
  fi
  ninja -C "$BUILD_DIR" -j"${MLSCHED_FUZZ_JOBS:-$(nproc)}" "${targets[@]/%/_fuzz}"
fi
built=$(date +%s)
if [ "$mode" = build ]; then
  echo "fuzz.sh: built ${#targets[@]} targets in $((built - start)) s"
  exit 0
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz.sh: --no-build needs the targets to run" >&2; exit 2; }
echo "fuzz.sh: running ${#targets[@]} target(s) for ${SECS} s each"

# libFuzzer's final figures: "stat::number_of_executed_units: N" and the last "cov: N" status line.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }
last_cov() { { grep -o 'cov: [0-9]*' "$1" || true; } | tail -1 | cut -d' ' -f2; }

# Runs target $1 for SECS seconds; its exit status and seconds go to $BUILD_DIR/logs/$1.result.
run_target() {
  local t=$1 corpus="$BUILD_DIR/corpus/$1" crashes="$BUILD_DIR/crashes/$1" log="$BUILD_DIR/logs/$1.log"
  mkdir -p "$corpus" "$crashes"
  local args=(-max_total_time="$SECS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$crashes/")
  [ -f "fuzz/dict/$t.dict" ] && args+=(-dict="fuzz/dict/$t.dict")
  # shellcheck disable=SC2206
  args+=(${MLSCHED_FUZZ_ARGS:-})
  local t0 rc=0
  t0=$(date +%s)
  "$BUILD_DIR/fuzz/${t}_fuzz" "${args[@]}" "$corpus" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  echo "$rc $(($(date +%s) - t0))" >"$BUILD_DIR/logs/$t.result"
}

# MLSCHED_FUZZ_PARALLEL targets at a time (default: one per CPU), each a single libFuzzer job.
parallel="${MLSCHED_FUZZ_PARALLEL:-$(nproc)}"
mkdir -p "$BUILD_DIR/logs"
running=0
for t in "${targets[@]}"; do
  rm -f "$BUILD_DIR/logs/$t.result"
  if [ "$running" -ge "$parallel" ]; then wait -n || true; running=$((running - 1)); fi
  run_target "$t" &
  running=$((running + 1))
done
wait || true

failed=()
summary=()
for t in "${targets[@]}"; do
  log="$BUILD_DIR/logs/$t.log" crashes="$BUILD_DIR/crashes/$t"
  rc=1 secs=?
  [ -f "$BUILD_DIR/logs/$t.result" ] && read -r rc secs <"$BUILD_DIR/logs/$t.result"
  execs=$(final_stat number_of_executed_units "$log")
  rate=$(final_stat average_exec_per_sec "$log")
  cov=$(last_cov "$log")
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="CRASH (rc $rc)"
    failed+=("$t")
    echo "---- $t crashed; the end of $log:"
    tail -40 "$log"
    ls "$crashes"
  fi
  summary+=("$(printf '%-20s %6s %12s %9s %7s  %s' "$t" "$secs" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$result")")
done

printf '%-20s %6s %12s %9s %7s  %s\n' target seconds execs execs/s cov result
printf '%s\n' "${summary[@]}"
echo "fuzz.sh: total $(($(date +%s) - start)) s (build $((built - start)) s)"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]} (reproducers in $BUILD_DIR/crashes/; rerun one with $BUILD_DIR/fuzz/TARGET_fuzz FILE)"
  exit 1
fi
