#!/usr/bin/env bash
# Installs what is missing, builds, then runs the whole test suite through ctest, the fuzz smoke
# pass included (its "fuzz:" entries: 10 s per target, MLSCHED_FUZZ_SECONDS=0 skips them).
# ctest's slots are quarter-cores (tests/CMakeLists.txt): -j is four times the CPUs,
# MLSCHED_TEST_JOBS overrides it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
cd "$BUILD_DIR"
# On a failure, the failed tests' own failure lines are repeated last, where a CI log's tail shows them.
ctest --output-on-failure -j"${MLSCHED_TEST_JOBS:-$((4 * $(nproc)))}" --timeout 900 || {
  rc=$?
  echo "---- why the failed tests failed (their FAILED/error lines, from Testing/Temporary/LastTest.log) ----"
  grep -E 'FAILED|^not ok|[Ee]rror:|: FAIL' Testing/Temporary/LastTest.log | grep -v '^[0-9]*/[0-9]* Test' | tail -40 || true
  exit "$rc"
}
