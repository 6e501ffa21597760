#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
cd "$BUILD_DIR"
ctest --output-on-failure -j"${MLSCHED_TEST_JOBS:-2}" --timeout 900
