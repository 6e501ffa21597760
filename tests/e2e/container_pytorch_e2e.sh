#!/usr/bin/env bash
# End to end (issue 31 point 4): an unchanged PyTorch DDP script (tests/e2e/data/ddp_check.py: it
# reads only torchrun's environment, RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT)
# runs as a 2-rank gang on two nodes of the local cluster, in an OCI image built here from
# Debian's python3-torch (torch_rootfs, packed with umoci, read by the nodes from an oci: layout),
# with Gloo on CPU, as the submitting user (nobody), its code mounted read-only. Checked: both
# ranks train, all-gather equal weights, and the job completes.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=container-pytorch-e2e
for tool in runc skopeo umoci tini-static busybox setpriv; do
  if ! command -v "$tool" >/dev/null; then echo "$E2E_NAME: SKIPPED: $tool is not installed (scripts/install-deps.sh)"; exit 0; fi
done
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs containers as root (agentd is root)"; exit 0; fi
if ! /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  echo "$E2E_NAME: SKIPPED: Debian's python3-torch is not installed (scripts/install-deps.sh)"; exit 0
fi
DIR="$MLSCHED_STATE/images"
# shellcheck source=tests/e2e/container_lib.sh
source "$ROOT/tests/e2e/container_lib.sh"
unmount_under "$MLSCHED_STATE"
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out" "$DIR"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
start=$(date +%s)
torch_rootfs "$DIR/rootfs"
layout_image "$DIR/rootfs" "$DIR/torch"
rm -rf "$DIR/rootfs"
chmod -R a+rX "$DIR/torch"
chmod a+x "$MLSCHED_STATE" "$DIR"
say "image oci:$DIR/torch:img built from Debian's python3-torch in $(( $(date +%s) - start )) s ($(du -sm "$DIR/torch" | cut -f1) MB packed)"

cluster_up
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
mkdir -p "$OUT/code" && cp "$ROOT/tests/e2e/data/ddp_check.py" "$OUT/code/" && chmod -R a+rX "$OUT/code"
# Two CPUs per rank on two-CPU nodes: one rank per node, MASTER_ADDR is rank 0's node.
job=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/cli/mlsub" --parsable -D "$OUT" -t 5:00 -J ddp -n 2 -c 2 \
  --container-image "oci:$DIR/torch:img" --container-mounts "$OUT/code:/code:ro" -o 'ddp-%j-%t.out' \
  --wrap 'echo "uid=$(id -u) rank=$RANK world=$WORLD_SIZE"; exec python3 /code/ddp_check.py')
state=""
for _ in $(seq 1 1500); do
  state=$("$BIN/cli/mlq" -j "$job" -h -o %T)
  case "$state" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL) break ;; esac
  sleep 0.2
done
nodes=$("$BIN/cli/mlq" -j "$job" -h -o %D)
[ "$state" = COMPLETED ] || fail "the DDP job ended '$state': $("$BIN/cli/mladmin" show job "$job" | head -40)
$(tail -20 "$OUT"/ddp-"$job"-*.out 2>/dev/null)"
[ "$nodes" = 2 ] || fail "the two ranks ran on $nodes node(s), not 2"
for r in 0 1; do
  out="$OUT/ddp-$job-$r.out"
  grep -q "uid=65534 rank=$r world=2" "$out" || fail "rank $r: $(cat "$out")"
  grep -q "^ddp rank $r/2 local_rank 0 loss [0-9.]* weights_equal True" "$out" || fail "rank $r did not train in step: $(cat "$out")"
done
say "an unchanged PyTorch DDP script ran on 2 nodes in the image in $(( $(date +%s) - start )) s: $(grep -h '^ddp rank' "$OUT"/ddp-"$job"-*.out | tr '\n' ';')"
