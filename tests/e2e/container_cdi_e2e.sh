#!/usr/bin/env bash
# End to end (issue 31 point 3, CDI): the local cluster's agents offer two GPUs each (--gpus
# test:2) described by a CDI spec like nvidia-ctk's (tests write it: the "GPUs" are harmless
# character devices, /dev/null's and /dev/zero's numbers, and the "driver" a root-owned file and
# directory here), read with --cdi-spec-dirs. A 2-rank job in a busybox image, one GPU per rank,
# as nobody: each rank sees its own GPU's node only (with the spec's numbers), the common node,
# the driver mounted read-only at the spec's path, the create-symlinks hook's link, the spec's
# environment and update-ldcache's folder on LD_LIBRARY_PATH; the ldconfig-based
# /usr/local/nvidia is absent. A job without GPUs gets none of it. A spec directory others can
# write (with a spec mounting /etc) is refused and said so, and the hook agentd does not reproduce
# (enable-cuda-compat) is logged. Sessions into a container job (mlrun --jobid --overlap, issue 32)
# run in its container as its user (runc exec), a --pty one on a terminal made there (tmux).
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=container-cdi-e2e
for tool in runc skopeo umoci tini-static busybox setpriv; do
  if ! command -v "$tool" >/dev/null; then echo "$E2E_NAME: SKIPPED: $tool is not installed (scripts/install-deps.sh)"; exit 0; fi
done
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs containers as root (agentd is root)"; exit 0; fi
DIR="$MLSCHED_STATE/images"
# shellcheck source=tests/e2e/container_lib.sh
source "$ROOT/tests/e2e/container_lib.sh"
unmount_under "$MLSCHED_STATE"
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out" "$DIR"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
busybox_rootfs "$DIR/rootfs"
layout_image "$DIR/rootfs" "$DIR/busybox"
chmod -R a+rX "$DIR/busybox"
chmod a+x "$MLSCHED_STATE" "$DIR"

# The "driver": root's, nobody else may write it.
DRV="$MLSCHED_STATE/driver"
mkdir -p "$DRV/bin"
echo "fake libcuda 555.1" > "$DRV/libcuda.so.555.1"
printf '#!/bin/sh\necho fake-smi\n' > "$DRV/bin/nvidia-smi"
chmod 0755 "$DRV" "$DRV/bin" "$DRV/bin/nvidia-smi" && chmod 0644 "$DRV/libcuda.so.555.1"
CDI="$MLSCHED_STATE/cdi" OPEN="$MLSCHED_STATE/cdi-open"
mkdir -p "$CDI" "$OPEN"
chmod 0755 "$CDI" && chmod 0777 "$OPEN"
cat > "$CDI/nvidia.yaml" <<EOF
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0, type: c, major: 1, minor: 3}
- name: "1"
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia1, type: c, major: 1, minor: 5}
- name: all
  containerEdits:
    deviceNodes:
    - {path: /dev/nvidia0, type: c, major: 1, minor: 3}
    - {path: /dev/nvidia1, type: c, major: 1, minor: 5}
containerEdits:
  env: [NVIDIA_VISIBLE_DEVICES=void, CDI_SPEC_SEEN=yes]
  deviceNodes:
  - {path: /dev/nvidiactl, type: c, major: 1, minor: 7}
  mounts:
  - {hostPath: $DRV/libcuda.so.555.1, containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.555.1, options: [ro, nosuid, nodev, bind]}
  - {hostPath: $DRV/bin, containerPath: /usr/local/cdi-driver/bin, options: [ro, nosuid, nodev, bind]}
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-ctk
    args: [nvidia-ctk, hook, create-symlinks, --link, libcuda.so.555.1::/usr/lib/x86_64-linux-gnu/libcuda.so.1]
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, enable-cuda-compat, --host-driver-version=555.1]
EOF
chmod 0644 "$CDI/nvidia.yaml"
# Anyone could have written this one: it would mount the host's /etc into every GPU job.
sed "s#hostPath: $DRV/bin#hostPath: /etc#; s#/usr/local/cdi-driver/bin#/host-etc#" "$CDI/nvidia.yaml" > "$OPEN/evil.yaml"
chmod 0644 "$OPEN/evil.yaml"

export MLSCHED_AGENT_ARGS="--gpus test:2 --cdi-spec-dirs $OPEN,$CDI"
cluster_up
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
wait_done() {
  local s=""
  for _ in $(seq 1 300); do
    s=$("$BIN/cli/mlq" -j "$1" -h -o %T)
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break ;; esac
    sleep 0.2
  done
  [ "$s" = COMPLETED ] || fail "job $1 ended '$s': $("$BIN/cli/mladmin" show job "$1" | head -40)
$(cat "$OUT"/*-"$1"*.out 2>/dev/null | tail -20)"
}

gpu=$(as_user "$BIN/cli/mlsub" --parsable -D "$OUT" -t 2:00 -J cdi -n 2 -c 1 --gpus-per-task 1 \
  --container-image "oci:$DIR/busybox:img" -o 'cdi-%j-%t.out' --wrap '
  echo "visible=$CUDA_VISIBLE_DEVICES nvd=$NVIDIA_VISIBLE_DEVICES seen=$CDI_SPEC_SEEN ld=$LD_LIBRARY_PATH uid=$(id -u)"
  for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do [ -c $d ] && echo "node $d $(stat -c %t:%T $d)"; done
  echo "link $(readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1)"
  echo "lib $(cat /usr/lib/x86_64-linux-gnu/libcuda.so.1)"
  echo "smi $(/usr/local/cdi-driver/bin/nvidia-smi)"
  (echo x >> /usr/lib/x86_64-linux-gnu/libcuda.so.555.1) 2>/dev/null && echo WROTE-DRIVER
  [ -e /usr/local/nvidia ] && echo LDCONFIG-FILES
  [ -e /host-etc ] && echo HOST-ETC-MOUNTED
  true')
plain=$(as_user "$BIN/cli/mlsub" --parsable -D "$OUT" -t 2:00 -J plain --container-image "oci:$DIR/busybox:img" \
  -o 'plain-%j.out' --wrap 'ls /dev; echo "nvd=${NVIDIA_VISIBLE_DEVICES:-unset}"; [ -e /usr/lib/x86_64-linux-gnu/libcuda.so.555.1 ] && echo HAS-DRIVER; true')
wait_done "$gpu"
wait_done "$plain"
for r in 0 1; do
  out="$OUT/cdi-$gpu-$r.out"
  v=$(sed -n 's/^visible=\([0-9]*\) .*/\1/p' "$out")
  [ -n "$v" ] || fail "rank $r: no CUDA_VISIBLE_DEVICES: $(cat "$out")"
  other=$(( 1 - v ))
  want=$([ "$v" = 0 ] && echo "1:3" || echo "1:5")
  grep -q "nvd=void seen=yes ld=.*/usr/lib/x86_64-linux-gnu uid=65534" "$out" || fail "rank $r: the spec's environment: $(cat "$out")"
  grep -qx "node /dev/nvidia$v $want" "$out" || fail "rank $r: its GPU /dev/nvidia$v ($want) is missing: $(cat "$out")"
  ! grep -q "node /dev/nvidia$other" "$out" || fail "rank $r sees another rank's GPU: $(cat "$out")"
  grep -qx "node /dev/nvidiactl 1:7" "$out" || fail "rank $r: no /dev/nvidiactl: $(cat "$out")"
  grep -qx "link libcuda.so.555.1" "$out" || fail "rank $r: the create-symlinks link: $(cat "$out")"
  grep -qx "lib fake libcuda 555.1" "$out" || fail "rank $r: the driver's library: $(cat "$out")"
  grep -qx "smi fake-smi" "$out" || fail "rank $r: the driver's programs: $(cat "$out")"
  ! grep -Eq "WROTE-DRIVER|LDCONFIG-FILES|HOST-ETC-MOUNTED" "$out" || fail "rank $r: $(cat "$out")"
done
[ "$(cat "$DRV/libcuda.so.555.1")" = "fake libcuda 555.1" ] || fail "the host's driver file changed"
grep -q "nvidia\|HAS-DRIVER" "$OUT/plain-$plain.out" && fail "a job without GPUs got the GPU's edits: $(cat "$OUT/plain-$plain.out")"
grep -qx "nvd=unset" "$OUT/plain-$plain.out" || fail "a job without GPUs got the spec's environment: $(cat "$OUT/plain-$plain.out")"
log="$MLSCHED_STATE/logs/agent-od-1.log"
grep -q "CDI spec refused: $OPEN: writable by group or others" "$log" || fail "the open spec directory was not refused: $(grep -i cdi "$log")"
grep -q "CDI hook not run.*enable-cuda-compat" "$log" || fail "the hook agentd does not run was not logged: $(grep -i cdi "$log")"
say "CDI: 2 ranks got their own GPU, the driver read-only, the hook's link and the spec's env; a job without GPUs none; an open spec directory refused"

# Sessions into a container job (mlrun --jobid N --overlap): runc exec into the rank's container,
# as the job's user, with the image's file system, its own GPU and the spec's environment; with
# --pty a terminal made inside the container (stty follows a resize; exit 3 comes back).
held=$(as_user "$BIN/cli/mlsub" --parsable -D "$OUT" -t 2:00 -J held -n 1 -c 1 --gpus-per-task 1 \
  --container-image "oci:$DIR/busybox:img" -o /dev/null --wrap 'sleep 300')
wait_for "$held" RUNNING 60
# The host's build directory must not be there: its CMakeCache.txt (the directories above the job's
# working directory exist in the image as the mount points of that directory).
set +e
got=$(as_user "$BIN/cli/mlrun" --jobid "$held" --overlap sh -c '
  echo "uid=$(id -u) seen=$CDI_SPEC_SEEN job=$MLSCHED_JOB_ID busybox=$([ -x /bin/busybox ] && echo yes)"
  ls /dev | grep "^nvidia" | tr "\n" " "; echo
  [ -e '"$BIN/CMakeCache.txt"' ] && echo HOST-BUILD-VISIBLE
  echo oops >&2; exit 5' 2>"$OUT/err")
rc=$?
set -e
[ "$rc" = 5 ] || fail "a session in a container job exited $rc, not 5: $got $(cat "$OUT/err")"
echo "$got" | qgrep -x "uid=65534 seen=yes job=$held busybox=yes" || fail "not in the job's container as its user: $got"
[ "$(echo "$got" | sed -n 2p | wc -w)" = 2 ] || fail "the session sees other GPUs than its own (and nvidiactl): $got"
! echo "$got" | qgrep HOST-BUILD-VISIBLE || fail "the session sees the host's file system: $got"
grep -qx oops "$OUT/err" || fail "the container session's stderr: $(cat "$OUT/err")"
if command -v tmux >/dev/null; then
  TMUX_SOCK="$MLSCHED_STATE/tmux.sock"
  trap 'tmux -S "$TMUX_SOCK" kill-server 2>/dev/null || true; bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
  tmux -S "$TMUX_SOCK" new-session -d -s c -x 90 -y 25 \
    "setpriv --reuid=65534 --regid=65534 --clear-groups env MLSCHED_SERVER=$MLSCHED_SERVER MLSCHED_TLS_CA=${MLSCHED_TLS_CA:-} MLSCHED_MUNGE_SOCKET=${MLSCHED_MUNGE_SOCKET:-} $BIN/cli/mlrun --jobid $held --overlap --pty sh; echo mlrun-exit=\$?; sleep 30"
  TMUX_TARGET=c
  keys 'echo "in-image $(id -u) $([ -x /bin/busybox ] && echo busybox) tty=$(tty)"' Enter
  wait_pane '^in-image 65534 busybox tty=/dev/pts/[0-9]' "no shell in the image on a terminal"
  keys 'echo "size $(stty size)"' Enter
  wait_pane '^size 25 90' "stty size is not the window's 25x90"
  tmux -S "$TMUX_SOCK" resize-window -t c -x 110 -y 33
  sleep 0.5
  keys 'echo "size $(stty size)"' Enter
  wait_pane '^size 33 110' "stty size did not follow the resize to 33x110"
  keys 'exit 3' Enter
  wait_pane '^mlrun-exit=3' "mlrun did not exit with the container shell's 3"
  say "a session in a container job: in its image as nobody, its own GPU only, exit 5 and stderr back; --pty: a terminal in the container, resized 25x90 -> 33x110, exit 3"
else
  say "a session in a container job: in its image as nobody, its own GPU only, exit 5 and stderr back (no tmux: terminal not tried)"
fi
"$BIN/cli/mlcancel" "$held"
