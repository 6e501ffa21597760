#!/usr/bin/env bash
# Builds mlsched's Debian packages with CPack (cmake/packaging.cmake) into $MLSCHED_BUILD_DIR/packages:
#   mlsched-schedd, mlsched-agentd, mlsched-client and mlsched-trainer (the CPU mltrain), and, when
#   the build has mltrain's CUDA path, mlsched-trainer-cuda too (the same build then makes the CPU
#   mltrain as well: trainer/cpu/mltrain).
# Builds what the packages hold first (the target mlsched_packaged, not the tests). Prints the
# paths of the .deb files made.
# Check them with `lintian --fail-on error PKG.deb`; install with `apt-get install ./PKG.deb` (or
# dpkg -i), as docs/operations.md says.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${MLSCHED_BUILD_DIR:-build}"
OUT="$BUILD_DIR/packages"
MLSCHED_BUILD_TARGETS=mlsched_packaged MLSCHED_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >&2
rm -rf "$OUT" && mkdir -p "$OUT"
(cd "$BUILD_DIR" && cpack -G DEB -B "$PWD/packages" >&2)
rm -rf "$OUT/_CPack_Packages"
realpath "$OUT"/*.deb
