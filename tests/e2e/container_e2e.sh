#!/usr/bin/env bash
# End to end, real parts (issue 31): a local OCI registry on loopback with TLS from a test CA
# (Debian's docker-registry), a busybox image built here with umoci and pushed with skopeo, the
# local cluster's four agents pulling it with skopeo into their image caches and running each
# rank with runc. Checked: a 2-rank gang in the image runs as the submitting user (nobody) with no
# capabilities, sees its RANK/WORLD_SIZE, only its own processes and the image's environment,
# cannot write the image but can write /tmp; the digest shows in mladmin show job; a second job
# reuses the cached image (no second pull); a missing image fails the job with the registry's
# reason and no retries; a tampered blob fails the pull; an image with a setuid-root binary and a
# device node runs with neither honoured; a mount of a path the user cannot read fails with the
# user's own EACCES; a job cannot reach another job's /dev/shm; the memory limit kills the task
# (OUT_OF_MEMORY); exit 75 requeues the job and it runs again from the cached image; a layer over
# the node's image cache size is refused before the fetch; oci-archive: and oci: images are read as
# the user; a registry with basic auth refuses anonymous pulls and takes the job's credentials file,
# and a private image in the cache is refused to a job without credentials that names its digest;
# a registry that is down requeues.
# Environment: MLSCHED_BUILD_DIR (the build), MLSCHED_STATE (a scratch directory, wiped).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${MLSCHED_BUILD_DIR:?set MLSCHED_BUILD_DIR}
export MLSCHED_BUILD_DIR MLSCHED_STATE=${MLSCHED_STATE:?set MLSCHED_STATE}
E2E_NAME=container-e2e
for tool in runc skopeo umoci tini-static docker-registry busybox setpriv; do
  if ! command -v "$tool" >/dev/null; then echo "$E2E_NAME: SKIPPED: $tool is not installed (scripts/install-deps.sh)"; exit 0; fi
done
if [ "$(id -u)" != 0 ]; then echo "$E2E_NAME: SKIPPED: runs containers as root (agentd is root)"; exit 0; fi
DIR="$MLSCHED_STATE/images"
# shellcheck source=tests/e2e/container_lib.sh
source "$ROOT/tests/e2e/container_lib.sh"
unmount_under "$MLSCHED_STATE"
rm -rf "$MLSCHED_STATE"
mkdir -p "$MLSCHED_STATE/out"
mkdir -p "$DIR"
# shellcheck source=tests/e2e/lib.sh
source "$ROOT/tests/e2e/lib.sh"
registry_up
trap 'registry_down' EXIT
busybox_rootfs "$DIR/rootfs"
push_image "$DIR/rootfs" busybox:1
say "registry on $REGISTRY with busybox:1"

export MLSCHED_AGENT_ARGS="--image-cert-dir $CERTS --image-cache-size 40M"
cluster_up
AUTH_PID=""
trap 'registry_down; [ -z "$AUTH_PID" ] || kill "$AUTH_PID"; bash "$ROOT/scripts/local-cluster.sh" down >/dev/null' EXIT
OUT="$MLSCHED_STATE/out"
chmod 1777 "$OUT"
# wait_end JOB STATE SECONDS: like wait_for, but a job that ends in another state fails at once.
wait_end() {
  local s
  for _ in $(seq 1 $(( $3 * 5 ))); do
    s=$(field "$1" %T)
    [ "$s" = "$2" ] && return 0
    case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY) fail "job $1 ended $s, not $2: $("$BIN/cli/mladmin" show job "$1" | head -30)";; esac
    sleep 0.2
  done
  fail "job $1 did not reach $2 within $3 s (state $(field "$1" %T))"
}
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
mlsub() { as_user "$BIN/cli/mlsub" --parsable -D "$OUT" -t 2:00 "$@"; }
IMG="docker://$REGISTRY/busybox:1"
"$BIN/cli/mladmin" nodes | qgrep runc || fail "mladmin nodes shows no runtime: $("$BIN/cli/mladmin" nodes)"

# 1. The gang in the image.
mkdir -p "$OUT/in" && echo "from the host" > "$OUT/in/hello" && chmod -R a+rX "$OUT/in"
job=$(mlsub -J ctr -n 2 -c 1 --container-image "$IMG" --container-mounts "$OUT/in:/data:ro" -o 'ctr-%j-%t.out' --wrap '
cat /data/hello; touch /data/x 2>/dev/null || echo "mount-read-only"
echo "uid=$(id -u) gid=$(id -g) rank=$RANK world=$WORLD_SIZE image_env=$IMAGE_ONLY"
grep CapEff /proc/self/status
echo "procs=$(ls /proc | grep -c "^[0-9]")"
touch /scratch/x 2>/dev/null && echo "image-writable" || echo "image-read-only"
echo data > /tmp/t && echo "tmp-writable"
grep " / " /proc/self/mountinfo | grep -q nosuid && echo "root-nosuid"')
wait_end "$job" COMPLETED 120
for r in 0 1; do
  out="$OUT/ctr-$job-$r.out"
  grep -q "uid=65534 gid=65534 rank=$r world=2 image_env=from-image" "$out" || fail "rank $r: $(cat "$out")"
  grep -q "CapEff:.0000000000000000" "$out" || fail "rank $r has capabilities: $(cat "$out")"
  grep -q "image-read-only" "$out" || fail "rank $r could write the image"
  grep -q "tmp-writable" "$out" || fail "rank $r cannot write /tmp"
  grep -q "root-nosuid" "$out" || fail "rank $r: the image's root is not nosuid"
  grep -q "from the host" "$out" || fail "rank $r: the user's mount is missing: $(cat "$out")"
  grep -q "mount-read-only" "$out" || fail "rank $r could write a :ro mount"
  procs=$(sed -n 's/^procs=//p' "$out")
  [ "$procs" -le 6 ] || fail "rank $r sees $procs processes (its own PID namespace: init, sh, ls, grep)"
done
digest=$("$BIN/cli/mladmin" show job "$job" | grep -o 'Digest=sha256:[0-9a-f]*' | cut -d= -f2)
[ -n "$digest" ] || fail "mladmin show job names no digest: $("$BIN/cli/mladmin" show job "$job")"
say "gang of 2 ran in $IMG ($digest) as nobody without capabilities, read-only, own PID namespace"

# 2. A second job reuses the cached image: no second pull on any node.
pulls_before=$(cat "$MLSCHED_STATE"/logs/agent-*.log | grep -c "image: pulling" || true)
job2=$(mlsub -J ctr2 -n 2 -c 1 --container-image "$IMG" --container-writable -o 'ctr2-%j-%t.out' --wrap 'touch /scratch/made && echo writable')
wait_end "$job2" COMPLETED 60
grep -q writable "$OUT/ctr2-$job2-0.out" || fail "--container-writable: $(cat "$OUT/ctr2-$job2-0.out")"
pulls_after=$(cat "$MLSCHED_STATE"/logs/agent-*.log | grep -c "image: pulling" || true)
[ "$pulls_after" = "$pulls_before" ] || fail "the cached image was pulled again ($pulls_before -> $pulls_after)"
say "second job ran from the cache ($pulls_after pulls in all), in a writable overlay"
# mladmin nodes shows the runtime and, from the next heartbeats, the node's image cache.
for _ in $(seq 1 75); do "$BIN/cli/mladmin" nodes | qgrep "runc [^ ]* (1 image, " && break; sleep 0.2; done
"$BIN/cli/mladmin" nodes | qgrep "runc [^ ]* (1 image, " || fail "no image cache in mladmin nodes: $("$BIN/cli/mladmin" nodes)"

# 2b. agentd reloads in place (SIGHUP, as `systemctl reload` on a package upgrade) while a container
# task runs: the same agentd process adopts it (its runc state, bundle and cached image), the task
# runs on, completes with its own exit code, and its bundle is torn down afterwards.
mkdir -p "$OUT/r2b" && chmod 755 "$OUT/r2b"
jobr=$(mlsub -J reload -n 1 -c 1 --container-image "$IMG" --container-mounts "$OUT/r2b:/data:ro" -o 'reload-%j.out' --wrap '
echo "started $$"; while [ ! -e /data/go ]; do sleep 0.1; done; echo "done $$"; exit 4')
wait_end "$jobr" RUNNING 60
for _ in $(seq 1 100); do grep -q started "$OUT/reload-$jobr.out" 2>/dev/null && break; sleep 0.1; done
noder=$("$BIN/cli/mladmin" show job "$jobr" | sed -n 's/^ *Tasks=//p' | cut -d: -f2 | sed -n 1p)
[ -n "$noder" ] || fail "no node for job $jobr: $("$BIN/cli/mladmin" show job "$jobr")"
apid=$(cat "$MLSCHED_STATE/pids/agent-$noder")
bundle="$MLSCHED_STATE/agents/$noder/containers/bundles/$jobr.1.0"
[ -d "$bundle/rootfs" ] || fail "no bundle at $bundle"
kill -HUP "$apid"
for _ in $(seq 1 100); do
  grep -q "task $jobr\.1/0: pid [0-9]* adopted after a reload" "$MLSCHED_STATE/logs/agent-$noder.log" && break; sleep 0.1
done
grep -q "task $jobr\.1/0: pid [0-9]* adopted after a reload" "$MLSCHED_STATE/logs/agent-$noder.log" ||
  fail "agentd on $noder did not adopt job $jobr's container: $(tail -20 "$MLSCHED_STATE/logs/agent-$noder.log")"
kill -0 "$apid" || fail "agentd on $noder exited on SIGHUP"
grep -q "$bundle/rootfs" /proc/self/mountinfo || fail "the adopted container's rootfs was unmounted"
[ "$(field "$jobr" %T)" = RUNNING ] || fail "job $jobr is $(field "$jobr" %T) after the reload"
touch "$OUT/r2b/go"
for _ in $(seq 1 300); do s=$(field "$jobr" %T); [ "$s" = RUNNING ] || break; sleep 0.2; done
[ "$(field "$jobr" %T)" = FAILED ] || fail "job $jobr ended $(field "$jobr" %T), not FAILED with its exit 4"
"$BIN/cli/mladmin" show job "$jobr" | qgrep "ExitCode=4" || fail "job $jobr: not its own exit code: $("$BIN/cli/mladmin" show job "$jobr" | head -20)"
[ "$(grep -c started "$OUT/reload-$jobr.out")" = 1 ] && grep -q "done" "$OUT/reload-$jobr.out" ||
  fail "job $jobr ran other than once: $(cat "$OUT/reload-$jobr.out")"
for _ in $(seq 1 100); do [ -e "$bundle" ] || break; sleep 0.1; done
[ ! -e "$bundle" ] || fail "the adopted container's bundle $bundle was not torn down"
say "agentd on $noder reloaded in place (pid $apid kept) with job $jobr's container running: adopted, exit 4 reported, bundle torn down"

# 3. A missing image fails the job at once with the registry's reason; nothing retried.
job3=$(mlsub -J missing --container-image "docker://$REGISTRY/nosuch:1" --wrap true)
wait_end "$job3" FAILED 60
"$BIN/cli/mladmin" show job "$job3" | qgrep -i "manifest unknown\|not found\|name unknown" ||
  fail "missing image: no registry reason in $("$BIN/cli/mladmin" show job "$job3")"
say "missing image: FAILED with the registry's reason"

# 4. Setuid-root binary and a device node in a layer: neither honoured.
mkdir -p "$DIR/evil"
cp -a "$DIR/rootfs/." "$DIR/evil/"
mkdir -p "$DIR/evil/suid" && cp /bin/busybox "$DIR/evil/suid/id" && chmod 4755 "$DIR/evil/suid/id"
mknod "$DIR/evil/dev/evil-mem" c 1 1
push_image "$DIR/evil" evil:1
job4=$(mlsub -J evil --container-image "docker://$REGISTRY/evil:1" -o 'evil-%j.out' --wrap '
stat -c "mode=%a" /suid/id; /suid/id -u; ls /dev/evil-mem 2>&1 || echo "no-device-node"')
wait_end "$job4" COMPLETED 60
grep -q "mode=755" "$OUT/evil-$job4.out" || fail "setuid bit kept: $(cat "$OUT/evil-$job4.out")"
grep -qx "65534" "$OUT/evil-$job4.out" || fail "setuid binary ran as someone else: $(cat "$OUT/evil-$job4.out")"
grep -q "no-device-node" "$OUT/evil-$job4.out" || fail "device node kept: $(cat "$OUT/evil-$job4.out")"
say "setuid bit cleared and device node removed from the image's layer"

# 5. A mount of a path the user cannot read: the user's own EACCES, the job fails, nothing else lost.
mkdir -p "$MLSCHED_STATE/secret" && chmod 700 "$MLSCHED_STATE/secret"
job5=$(mlsub -J noread --container-image "$IMG" --container-mounts "$MLSCHED_STATE/secret:/data" --wrap 'ls /data')
wait_end "$job5" FAILED 60
"$BIN/cli/mladmin" show job "$job5" | qgrep "Permission denied" || fail "unreadable mount: $("$BIN/cli/mladmin" show job "$job5")"
say "mount of a directory the user cannot read: FAILED with Permission denied"

# 6. A job's /dev/shm is its own. 5 one-CPU ranks of the first job on the 8 CPUs of 4 nodes leave
# some node with one of its ranks and a free CPU; the second job's 3 ranks take the free CPUs, so
# one of them shares a node with the first job, and none may see its file.
job6=$(mlsub -J shm1 -n 5 -c 1 --mem-per-task 256M --spot allow --container-image "$IMG" -o 'shm1-%j-%t.out' --wrap 'echo secret > /dev/shm/mine; echo wrote; sleep 30')
wait_end "$job6" RUNNING 60
for _ in $(seq 1 50); do [ "$(cat "$OUT"/shm1-"$job6"-*.out 2>/dev/null | grep -c wrote)" = 5 ] && break; sleep 0.2; done
job7=$(mlsub -J shm2 -n 3 -c 1 --mem-per-task 256M --spot allow --container-image "$IMG" -o 'shm2-%j-%t.out' --wrap 'cat /dev/shm/mine 2>/dev/null || echo no-shared-shm')
wait_end "$job7" COMPLETED 60
[ "$(cat "$OUT"/shm2-"$job7"-*.out | grep -c no-shared-shm)" = 3 ] || fail "job $job7 reached job $job6's /dev/shm"
job_nodes() { "$BIN/cli/mladmin" show job "$1" | sed -n 's/^ *Tasks=//p' | tr ' ' '\n' | cut -d: -f2 | sort -u; }
shared=$(comm -12 <(job_nodes "$job6") <(job_nodes "$job7") | sed -n 1p)
[ -n "$shared" ] || fail "jobs $job6 and $job7 shared no node ($(field "$job6" %N) / $(field "$job7" %N))"
as_user "$BIN/cli/mlcancel" "$job6"
wait_end "$job6" CANCELLED 30
say "/dev/shm is per job (jobs $job6 and $job7 both on $shared)"

# 7. The memory limit holds in the container: the kernel's OOM killer, reported OUT_OF_MEMORY.
job8=$(mlsub -J oom --mem-per-task 32M --container-image "$IMG" --wrap 'dd if=/dev/zero of=/dev/null bs=128M count=1')
wait_end "$job8" FAILED 60
"$BIN/cli/mladmin" show job "$job8" | qgrep "OutOfMemory\|OUT_OF_MEMORY" || fail "OOM not reported: $("$BIN/cli/mladmin" show job "$job8")"
say "memory limit: OUT_OF_MEMORY"

# 8. Exit 75 requeues; the next attempt starts from the cached image.
job9=$(mlsub -J requeue --container-image "$IMG" -o 'rq-%j.out' --wrap 'test -e /scratch/made && echo LEAKED; [ "$MLSCHED_ATTEMPT" = 1 ] && exit 75; echo attempt=$MLSCHED_ATTEMPT')
wait_end "$job9" COMPLETED 90
grep -q "attempt=2" "$OUT/rq-$job9.out" || fail "requeued job: $(cat "$OUT/rq-$job9.out")"
grep -q LEAKED "$OUT/rq-$job9.out" && fail "a writable overlay file outlived its task"

say "exit 75 requeued the job and it ran again in the image"

# 9. A tampered blob fails the pull (skopeo checks every blob against the manifest's digest).
mkdir -p "$DIR/tampered" && cp -a "$DIR/rootfs/." "$DIR/tampered/" && echo tampered > "$DIR/tampered/etc/marker"
push_image "$DIR/tampered" tampered:1
layer_digest=$(skopeo inspect --cert-dir "$CERTS" --format '{{range .Layers}}{{.}}{{end}}' "docker://$REGISTRY/tampered:1")
hex=${layer_digest#sha256:}
layer="$DIR/registry/main/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data"
[ -f "$layer" ] || fail "no blob $layer"
# Flip byte 1000 (writing a fixed byte did nothing when the blob already had it there: 1 run in 256).
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1000); b = f.read(1)[0]; f.seek(1000); f.write(bytes([b ^ 0xff]))' "$layer"
[ "sha256:$(sha256sum "$layer" | cut -d' ' -f1)" != "$layer_digest" ] || fail "the blob $layer did not change"
job10=$(mlsub -J tampered --container-image "docker://$REGISTRY/tampered:1" --wrap true)
wait_end "$job10" FAILED 90
"$BIN/cli/mladmin" show job "$job10" | qgrep -i "digest" || fail "tampered blob: $("$BIN/cli/mladmin" show job "$job10")"
say "tampered blob: the pull failed on its digest"

# 10. A layer larger than the node's whole image cache (--image-cache-size 40M) is refused before
# anything is fetched, and the job fails with the reason.
mkdir -p "$DIR/huge" && cp -a "$DIR/rootfs/." "$DIR/huge/" && head -c 50000000 /dev/urandom > "$DIR/huge/blob"
push_image "$DIR/huge" huge:1
job12=$(mlsub -J huge --container-image "docker://$REGISTRY/huge:1" --wrap true)
wait_end "$job12" FAILED 60
"$BIN/cli/mladmin" show job "$job12" | qgrep "more than the node's image cache holds" ||
  fail "huge layer: $("$BIN/cli/mladmin" show job "$job12" | grep -i image)"
say "a layer over the image cache's size: refused before the fetch"

# 11. Images on the node's file system are read as the user: an OCI archive and a layout directory
# the user can read run; an archive behind a directory the user cannot search fails with EACCES.
layout_image "$DIR/rootfs" "$OUT/layout" && chmod -R a+rX "$OUT/layout"
skopeo copy --quiet "oci:$OUT/layout:img" "oci-archive:$OUT/busybox.tar:img" && chmod a+r "$OUT/busybox.tar"
job13=$(mlsub -J archive --container-image "oci-archive:$OUT/busybox.tar:img" -o 'arch-%j.out' --wrap 'echo "from-archive $IMAGE_ONLY"')
wait_end "$job13" COMPLETED 60
grep -q "from-archive from-image" "$OUT/arch-$job13.out" || fail "oci-archive image: $(cat "$OUT/arch-$job13.out")"
job14=$(mlsub -J layout --container-image "oci:$OUT/layout:img" -o 'lay-%j.out' --wrap 'echo from-layout')
wait_end "$job14" COMPLETED 60
grep -q "from-layout" "$OUT/lay-$job14.out" || fail "oci layout image: $(cat "$OUT/lay-$job14.out")"
cp "$OUT/busybox.tar" "$MLSCHED_STATE/secret/busybox.tar"
job15=$(mlsub -J hidden --container-image "oci-archive:$MLSCHED_STATE/secret/busybox.tar:img" --wrap true)
wait_end "$job15" FAILED 60
"$BIN/cli/mladmin" show job "$job15" | qgrep "permission denied\|Permission denied" ||
  fail "unreadable archive: $("$BIN/cli/mladmin" show job "$job15" | grep -i image)"
say "oci-archive: and oci: images read as the user; one the user cannot reach: FAILED (permission denied)"

# 12. A registry with basic auth (htpasswd): an anonymous pull is refused for good; the job's own
# credentials file (mode 0600, the user's: agentd reads it as the user) lets it pull.
python3 -W ignore -c 'import crypt; print("mluser:" + crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH)))' > "$DIR/registry/htpasswd"
registry_serve private "$DIR/registry/htpasswd"
auth_reg=$SERVED AUTH_PID=$SERVED_PID
# The private image: busybox plus a file of its own, so its digest is cached nowhere as public.
cp -a "$DIR/rootfs" "$DIR/rootfs-private" && echo "team secret" > "$DIR/rootfs-private/secret.txt"
layout_image "$DIR/rootfs-private" "$DIR/private-layout"
skopeo copy --quiet --dest-cert-dir "$CERTS" --dest-creds mluser:s3cret "oci:$DIR/private-layout:img" "docker://$auth_reg/private:1"
private_digest=$(skopeo inspect --cert-dir "$CERTS" --creds mluser:s3cret --format '{{.Digest}}' "docker://$auth_reg/private:1")
printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$auth_reg" "$(printf mluser:s3cret | base64)" > "$OUT/auth.json"
chown 65534:65534 "$OUT/auth.json" && chmod 600 "$OUT/auth.json"
job16=$(mlsub -J anon --container-image "docker://$auth_reg/private:1" --wrap true)
wait_end "$job16" FAILED 60
"$BIN/cli/mladmin" show job "$job16" | qgrep -i "unauthorized\|authentication required" ||
  fail "anonymous pull from an auth registry: $("$BIN/cli/mladmin" show job "$job16" | grep -i image)"
# Two ranks of two CPUs: one on each node of the default partition, so both caches hold it.
job17=$(mlsub -J authed -n 2 -c 2 --container-image "docker://$auth_reg/private:1" --container-auth-file "$OUT/auth.json" \
  -o 'auth-%j-%t.out' --wrap 'cat /secret.txt')
wait_end "$job17" COMPLETED 60
grep -q "team secret" "$OUT/auth-$job17-0.out" || fail "pull with credentials: $(cat "$OUT/auth-$job17-0.out")"
# Attack: the private image is in every node's cache; a job without credentials names its digest.
job18=$(mlsub -J by-digest --container-image "docker://$auth_reg/private@$private_digest" -o 'steal-%j.out' --wrap 'cat /secret.txt')
wait_end "$job18" FAILED 60
"$BIN/cli/mladmin" show job "$job18" | qgrep "the registry refuses this job the cached" ||
  fail "a cached private image named by digest without credentials: $("$BIN/cli/mladmin" show job "$job18" | grep -i image)"
! grep -q "team secret" "$OUT/steal-$job18.out" 2>/dev/null || fail "a job without credentials read the private image"
# With the credentials, by digest: the registry is asked again and says yes.
job19=$(mlsub -J by-digest-ok --container-image "docker://$auth_reg/private@$private_digest" --container-auth-file "$OUT/auth.json" \
  -o 'auth-%j.out' --wrap 'cat /secret.txt')
wait_end "$job19" COMPLETED 60
grep -q "team secret" "$OUT/auth-$job19.out" || fail "by digest with credentials: $(cat "$OUT/auth-$job19.out")"
# The same image public in another registry (a mirror): served there in full, so the cached copy is used.
skopeo copy --quiet --dest-cert-dir "$CERTS" "oci:$DIR/private-layout:img" "docker://$REGISTRY/mirror:1"
job20=$(mlsub -J mirror --container-image "docker://$REGISTRY/mirror:1" -o 'auth-%j.out' --wrap 'cat /secret.txt')
wait_end "$job20" COMPLETED 60
grep -q "team secret" "$OUT/auth-$job20.out" || fail "the image from a public mirror: $(cat "$OUT/auth-$job20.out")"
# Attack: the digest named at a source that does not serve it (a registry that only claims it).
job21=$(mlsub -J claim --container-image "docker://$REGISTRY/claimed@$private_digest" -o 'steal-%j.out' --wrap 'cat /secret.txt')
wait_end "$job21" FAILED 60
"$BIN/cli/mladmin" show job "$job21" | qgrep "did not serve all of it" ||
  fail "a cached private digest claimed at another source: $("$BIN/cli/mladmin" show job "$job21" | grep -i image)"
! grep -q "team secret" "$OUT/steal-$job21.out" 2>/dev/null || fail "a job read the private image through another source"
say "registry with basic auth: anonymous refused, the job's credentials file (read as the user) pulls; the cached" \
  "private image named by digest is refused without credentials, used with them, used from a public mirror" \
  "that serves it in full, refused at a source that does not"

# 13. A registry that is down: a transient failure, the job goes back to the queue with a backoff.
job11=$(mlsub -J down --container-image "docker://127.0.0.1:$(free_port)/busybox:1" --wrap true)
for _ in $(seq 1 150); do grep -q "job $job11 attempt 1: prepare failed on" "$MLSCHED_STATE/logs/schedd.log" && break; sleep 0.2; done
grep "job $job11 attempt 1: prepare failed on" "$MLSCHED_STATE/logs/schedd.log" | qgrep "connection refused" ||
  fail "registry down: $(grep "job $job11" "$MLSCHED_STATE/logs/schedd.log" | tail -3)"
sleep 1
[ "$(field "$job11" %T)" = PENDING ] || fail "registry down: job $job11 is $(field "$job11" %T), not requeued"
as_user "$BIN/cli/mlcancel" "$job11"
say "registry down: requeued with a backoff, not failed"
say "PASSED"
