#!/usr/bin/env bash
# Configures and builds everything into build/ (Ninja, ccache). Extra arguments go to cmake.
# MLSCHED_BUILD_TARGETS (space-separated Ninja targets) builds only those: the demo builds the
# daemons, tools and mltrain (219 of 405 build steps), the test command everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
extra=()
[ "${CI:-}" = "true" ] && extra+=(-DMLSCHED_WERROR=ON)
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" "$@"
fi
# The larger test binaries use precompiled headers (tests/CMakeLists.txt): ccache caches such
# units only with this sloppiness (ccache manual, "Precompiled headers").
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
# shellcheck disable=SC2086  # word-split: one argument per target
ninja -C "$BUILD_DIR" -j"${MLSCHED_JOBS:-$(nproc)}" ${MLSCHED_BUILD_TARGETS:-}
