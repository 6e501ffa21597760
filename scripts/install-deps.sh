#!/usr/bin/env bash
# Installs mlsched's dependencies from Debian 12's packages (one apt-get line), plus s3rver from npm
# for the S3 tests and the demo's object store when npm is available. Idempotent; needs root or sudo.
#   scripts/install-deps.sh              everything: build, demo and every test (the test command)
#   scripts/install-deps.sh demo         only what building the demo's targets and running it need
#   scripts/install-deps.sh demo containers   ... and the container tools (DEMO_CONTAINER=1)
# The demo's set is 356 packages and 280 MB to download on a fresh Debian 12 (with the container
# tools 577 and 438 MB); everything is 984 packages and 719 MB (python3-torch, clang-14 and
# prometheus are most of the difference).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# Build the daemons, tools and mltrain, and run the demo's local cluster (munge, openssl for its
# certificates, elfutils' eu-stack for the gang watchdog's stack traces).
DEMO_PKGS="build-essential cmake ninja-build pkg-config ccache libboost-dev libboost-filesystem-dev \
libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libsqlite3-dev sqlite3 libspdlog-dev \
libcli11-dev catch2 libtomlplusplus-dev nlohmann-json3-dev libyaml-dev libcurl4-openssl-dev libssl-dev zlib1g-dev \
libgloo-dev libopenblas-dev dataset-fashion-mnist prometheus-cpp-dev procps \
munge libmunge-dev openssl util-linux elfutils \
golang-etcd-server-dev golang-github-gogo-protobuf-dev golang-github-gogo-googleapis-dev"
# Containers on the nodes (runc, skopeo, umoci, tini); docker-registry and busybox-static for the
# local registry and the images of the tests and of DEMO_CONTAINER=1.
CONTAINER_PKGS="runc skopeo umoci tini docker-registry busybox-static"
# The tests only: clang-14 and its fuzzer runtime (scripts/fuzz.sh), etcd for HA, python3-torch for
# the image that runs an unchanged PyTorch DDP script (tests/e2e/container_pytorch_e2e.sh), tmux for
# the interactive sessions' terminal test, gdb (the watchdog's other stack tool), prometheus for
# promtool (the shipped alert rules), lintian (the Debian packages), iproute2, iptables and
# libnetfilter-queue-dev (the multi-host tests in network namespaces: links cut, lossy, delayed).
TEST_PKGS="clang-14 libclang-rt-14-dev etcd-server etcd-client python3-torch tmux gdb prometheus \
lintian iproute2 iptables libnetfilter-queue-dev"
case "${1:-all}" in
  all) PKGS="$DEMO_PKGS $CONTAINER_PKGS $TEST_PKGS" ;;
  demo) PKGS="$DEMO_PKGS"; [ "${2:-}" = containers ] && PKGS="$PKGS $CONTAINER_PKGS" ;;
  *) echo "usage: scripts/install-deps.sh [all | demo [containers]]" >&2; exit 2 ;;
esac
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
# mltrain's S3 checkpoint tests: s3rver (loopback S3 server) and aws4 (independent SigV4 signer),
# pinned by tools/s3/package-lock.json. Without npm the S3 test skips with a message.
if command -v npm >/dev/null 2>&1; then
  (cd "$(dirname "$0")/../tools/s3" && npm ci --no-audit --no-fund --loglevel=error)
fi
