#!/usr/bin/env bash
# Installs every build and test dependency of mlsched from Debian 12's packages (one apt-get line),
# (containers: runc, skopeo, umoci and tini on the nodes; docker-registry and busybox-static for the
# tests' local registry and images; python3-torch for the test image that runs an unchanged PyTorch
# DDP script, tests/e2e/container_pytorch_e2e.sh; tmux for the interactive sessions' terminal test; elfutils' eu-stack and gdb for the gang watchdog's stack traces; prometheus for promtool, which checks the shipped alert rules; lintian, which checks the Debian packages, and iproute2 and iptables for the multi-host tests in network namespaces), plus s3rver from npm for the S3 tests when npm is available. Idempotent; needs root or sudo.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="build-essential cmake ninja-build pkg-config ccache libboost-dev libboost-filesystem-dev \
libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libsqlite3-dev sqlite3 libspdlog-dev \
libcli11-dev catch2 libtomlplusplus-dev nlohmann-json3-dev libyaml-dev libcurl4-openssl-dev libssl-dev zlib1g-dev \
libgloo-dev libopenblas-dev dataset-fashion-mnist prometheus-cpp-dev procps \
munge libmunge-dev openssl util-linux clang-14 libclang-rt-14-dev \
etcd-server etcd-client golang-etcd-server-dev golang-github-gogo-protobuf-dev golang-github-gogo-googleapis-dev \
runc skopeo umoci tini docker-registry busybox-static python3-torch tmux elfutils gdb prometheus \
lintian iproute2 iptables"
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
