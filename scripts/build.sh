#!/usr/bin/env bash
# Configures and builds everything into build/ (Ninja, ccache). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
extra=()
[ "${CI:-}" = "true" ] && extra+=(-DMLSCHED_WERROR=ON)
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" "$@"
fi
ninja -C "$BUILD_DIR" -j"${MLSCHED_JOBS:-$(nproc)}"
