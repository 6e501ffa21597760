#!/usr/bin/env bash
# Container benchmarks (issue 31, point 7): a local registry on loopback (TLS, test CA) with three
# images built here (busybox; mltrain with the Debian libraries it links; a ~100 MB image of
# incompressible data on busybox), then container_bench: cold pull+unpack with 1 and 4 concurrent
# tasks, the start overhead of an empty task in an image against a bare one (warm cache), and
# mltrain's samples/s bare and in its image, in the same run. Needs root and scripts/install-deps.sh.
#   bash bench/agentd/container_bench.sh [BUILD_DIR] [--starts N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${1:-$ROOT/build}" && pwd)
shift || true
DIR=$(mktemp -d /tmp/mlsched-ctr-bench.XXXXXX)
chmod 755 "$DIR"  # the tasks run as nobody and write below it
# shellcheck source=tests/e2e/container_lib.sh
source "$ROOT/tests/e2e/container_lib.sh"
trap 'registry_down; unmount_under "$DIR"; rm -rf "$DIR"' EXIT
registry_up
busybox_rootfs "$DIR/busybox" && push_image "$DIR/busybox" busybox:1
mltrain_rootfs "$DIR/mltrain" "$BIN/trainer/mltrain" && push_image "$DIR/mltrain" mltrain:bench
busybox_rootfs "$DIR/big" && head -c 100000000 /dev/urandom > "$DIR/big/data.bin" && push_image "$DIR/big" bench-big:1
echo "images: busybox $(du -sm "$DIR/busybox" | cut -f1) MB, mltrain $(du -sm "$DIR/mltrain" | cut -f1) MB, bench-big $(du -sm "$DIR/big" | cut -f1) MB; registry $REGISTRY"
"$BIN/bench/agentd/container_bench" --registry "$REGISTRY" --cert-dir "$CERTS" --work "$DIR/work" --mltrain "$BIN/trainer/mltrain" "$@"
