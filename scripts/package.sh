#!/usr/bin/env bash
# Builds mlsched's Debian packages with CPack (cmake/packaging.cmake) into $MLSCHED_BUILD_DIR/packages:
#   mlsched-schedd, mlsched-agentd, mlsched-client and mlsched-trainer (the CPU mltrain), and, when
#   the build has mltrain's CUDA path, mlsched-trainer-cuda too (the CPU trainer is then built in
#   $MLSCHED_BUILD_DIR-cpu, mltrain only).
# Builds what the packages hold first (not the tests). Prints the paths of the .deb files made.
# Check them with `lintian --fail-on error PKG.deb`; install with `apt-get install ./PKG.deb` (or
# dpkg -i), as docs/operations.md says.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
OUT="$BUILD_DIR/packages"
MLSCHED_BUILD_TARGETS="schedd agentd mlreport mlsub mlq mlcancel mladmin mlrun mlalloc mlacct mltrain" \
  MLSCHED_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >&2
rm -rf "$OUT" && mkdir -p "$OUT"
(cd "$BUILD_DIR" && cpack -G DEB -B "$PWD/packages" >&2)
if ls "$OUT"/mlsched-trainer-cuda_*.deb >/dev/null 2>&1; then
  CPU="$BUILD_DIR-cpu"
  if [ ! -f "$CPU/build.ninja" ]; then
    cmake -G Ninja -S . -B "$CPU" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLSCHED_WITH_CUDA=OFF >&2
  fi
  # The same sources as the main build's, so ccache serves most of them (the directory is not hashed).
  CCACHE_NOHASHDIR=1 ninja -C "$CPU" -j"${MLSCHED_JOBS:-$(nproc)}" mltrain >&2
  (cd "$CPU" && cpack -G DEB -B "$PWD/packages" -D CPACK_COMPONENTS_ALL=trainer >&2)
  cp "$CPU"/packages/mlsched-trainer_*.deb "$OUT/"
fi
rm -rf "$OUT/_CPack_Packages"
realpath "$OUT"/*.deb
