#!/usr/bin/env bash
# The Debian packages (issue 35): scripts/package.sh builds mlsched-schedd, -agentd, -client and
# -trainer (and -trainer-cuda with the CUDA build); lintian finds no error in any; each holds what
# docs/operations.md says (units, conffiles, the sysusers file, Depends from dpkg-shlibdeps plus
# munge). Installing them is tests/e2e/hosts_e2e.sh's part (dpkg -i, then a cluster from them).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${MLSCHED_BUILD_DIR:-$ROOT/build}"
MLSCHED_STATE="$BIN/e2e-packages-state" E2E_NAME=packages
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
fail() { say "FAILED: $*" >&2; exit 1; }
command -v lintian >/dev/null || fail "lintian is missing (scripts/install-deps.sh installs it)"
t=$(date +%s)
MLSCHED_BUILD_DIR="$BIN" bash "$ROOT/scripts/package.sh" > "$BIN/packages.list" 2> "$BIN/packages.log" ||
  { tail -30 "$BIN/packages.log" >&2; fail "scripts/package.sh failed"; }
say "scripts/package.sh: $(wc -l < "$BIN/packages.list") packages in $(( $(date +%s) - t )) s"
P=$BIN/packages
for p in schedd agentd client trainer; do ls "$P"/mlsched-${p}_*.deb >/dev/null || fail "no mlsched-$p package"; done
# lintian as Debian's archive runs it: any error fails (warnings are printed).
rc=0; lintian --fail-on error "$P"/*.deb > "$BIN/lintian.log" 2>&1 || rc=$?
grep -v -e 'running with root privileges' -e ' no-manual-page ' "$BIN/lintian.log" || true
[ "$rc" = 0 ] || fail "lintian reports errors (above; all of it in $BIN/lintian.log)"
say "lintian: no errors in $(ls "$P"/*.deb | wc -l) packages"
has() { dpkg-deb -c "$1" | awk '{print $6}' | qgrep -x "./$2" || fail "$(basename "$1") lacks /$2"; }
S=$(ls "$P"/mlsched-schedd_*.deb) A=$(ls "$P"/mlsched-agentd_*.deb) C=$(ls "$P"/mlsched-client_*.deb)
for f in usr/sbin/schedd usr/bin/mlreport usr/sbin/mlsched-certs lib/systemd/system/mlsched-schedd.service \
         usr/lib/sysusers.d/mlsched.conf etc/mlsched/policy.toml etc/mlsched/schedd.env usr/share/doc/mlsched-schedd/copyright; do
  has "$S" "$f"; done
for f in usr/sbin/agentd lib/systemd/system/mlsched-agentd.service etc/mlsched/agentd.env; do has "$A" "$f"; done
for f in mlsub mlq mlcancel mladmin mlrun mlalloc mlacct; do has "$C" "usr/bin/$f"; done
[ "$(dpkg-deb -I "$S" conffiles | sort | tr '\n' ' ')" = "/etc/mlsched/policy.toml /etc/mlsched/schedd.env " ] || fail "schedd's conffiles: $(dpkg-deb -I "$S" conffiles)"
[ "$(dpkg-deb -I "$A" conffiles)" = "/etc/mlsched/agentd.env" ] || fail "agentd's conffiles"
for d in "$S" "$C"; do dpkg-deb -f "$d" Depends | qgrep -w munge || fail "$(basename "$d") does not depend on munge"; done
dpkg-deb -f "$S" Depends | qgrep 'libsqlite3-0' || fail "schedd's Depends lack what dpkg-shlibdeps finds (libsqlite3-0)"
dpkg-deb --fsys-tarfile "$A" | tar -xO ./lib/systemd/system/mlsched-agentd.service | qgrep -x 'Delegate=yes' || fail "agentd's unit lacks Delegate=yes"
dpkg-deb --fsys-tarfile "$S" | tar -xO ./lib/systemd/system/mlsched-schedd.service | qgrep -x 'User=mlsched' || fail "schedd's unit does not run as mlsched"
# With the GPU path, the CPU package's mltrain is the CPU-only one (the same build's trainer/cpu).
if ls "$P"/mlsched-trainer-cuda_*.deb >/dev/null 2>&1; then
  T=$(ls "$P"/mlsched-trainer_*.deb) TC=$(ls "$P"/mlsched-trainer-cuda_*.deb)
  dpkg-deb --fsys-tarfile "$T" | tar -xO ./usr/bin/mltrain > "$BIN/packages-mltrain-cpu"
  dpkg-deb --fsys-tarfile "$TC" | tar -xO ./usr/bin/mltrain > "$BIN/packages-mltrain-cuda"
  ! readelf -d "$BIN/packages-mltrain-cpu" | qgrep 'libnccl\|libcudart\|libcublas' || fail "mlsched-trainer's mltrain links CUDA"
  readelf -d "$BIN/packages-mltrain-cuda" | qgrep 'libnccl' || fail "mlsched-trainer-cuda's mltrain does not link NCCL"
  [ "$(dpkg-deb -f "$TC" Provides)" = mlsched-trainer ] || fail "mlsched-trainer-cuda does not provide mlsched-trainer"
fi
for d in "$P"/*.deb; do say "$(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version): $(du -k "$d" | cut -f1) KB, Depends: $(dpkg-deb -f "$d" Depends | cut -c1-90)..."; done
say PASSED
