#!/usr/bin/env bash
# Installs what is missing, builds, runs the fuzz smoke pass, then the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
# libFuzzer smoke pass over every parser of untrusted input (fuzz/README.md), 20 s per target;
# MLSCHED_FUZZ_SECONDS=0 skips it.
if [ "${MLSCHED_FUZZ_SECONDS:-20}" != 0 ]; then bash scripts/fuzz.sh "${MLSCHED_FUZZ_SECONDS:-20}"; fi
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
cd "$BUILD_DIR"
# On a failure, the failed tests' own failure lines are repeated last, where a CI log's tail shows them.
ctest --output-on-failure -j"${MLSCHED_TEST_JOBS:-2}" --timeout 900 || {
  rc=$?
  echo "---- why the failed tests failed (their FAILED/error lines, from Testing/Temporary/LastTest.log) ----"
  grep -E 'FAILED|^not ok|[Ee]rror:|: FAIL' Testing/Temporary/LastTest.log | grep -v '^[0-9]*/[0-9]* Test' | tail -40 || true
  exit "$rc"
}
