# Container test fixtures (sourced): a local OCI registry on loopback with TLS from a test CA
# (Debian's docker-registry), and test images built from Debian's busybox-static, packed to OCI
# with umoci and pushed with skopeo. Needs DIR (a scratch directory).
# free_port: a free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# registry_up: CA + certificate for 127.0.0.1, config, `docker-registry serve`; sets REGISTRY
# (127.0.0.1:PORT) and CERTS (a skopeo cert dir holding the CA).
registry_up() {
  mkdir -p "$DIR/registry" "$DIR/certs"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/registry/ca.key" -out "$DIR/certs/ca.crt" -days 2 \
    -subj /CN=mlsched-test-registry-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$DIR/registry/reg.key" -out "$DIR/registry/reg.csr" -subj /CN=127.0.0.1 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' > "$DIR/registry/ext.cnf"
  openssl x509 -req -in "$DIR/registry/reg.csr" -CA "$DIR/certs/ca.crt" -CAkey "$DIR/registry/ca.key" -CAcreateserial \
    -out "$DIR/registry/reg.crt" -days 2 -extfile "$DIR/registry/ext.cnf" 2>/dev/null
  CERTS="$DIR/certs"
  registry_serve main && REGISTRY=$SERVED && REGISTRY_PID=$SERVED_PID
}
# registry_serve NAME [HTPASSWD]: one more docker-registry on a free loopback port with the test
# CA's certificate (registry_up first), storing in $DIR/registry/NAME, with basic auth from
# HTPASSWD when given; sets SERVED (127.0.0.1:PORT) and SERVED_PID.
registry_serve() {
  local name=$1 htpasswd=${2:-} auth=""
  SERVED="127.0.0.1:$(free_port)"
  [ -z "$htpasswd" ] || auth="auth: {htpasswd: {realm: mlsched-test, path: $htpasswd}}"
  cat > "$DIR/registry/$name.yml" <<EOC
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $DIR/registry/$name}, delete: {enabled: true}}
$auth
http:
  addr: $SERVED
  tls: {certificate: $DIR/registry/reg.crt, key: $DIR/registry/reg.key}
EOC
  docker-registry serve "$DIR/registry/$name.yml" > "$DIR/registry/$name.log" 2>&1 &
  SERVED_PID=$!
  local code
  for _ in $(seq 1 50); do  # 200 anonymous, 401 with auth: either way it answers
    code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$CERTS/ca.crt" "https://$SERVED/v2/" || true)
    [ "$code" = 200 ] || [ "$code" = 401 ] && return 0
    sleep 0.1
  done
  echo "registry $name did not come up: $(tail -5 "$DIR/registry/$name.log")" >&2
  return 1
}
# unmount_under DIR: lazily unmounts whatever a killed agent left mounted below DIR (image
# overlays, job /dev/shm tmpfs), deepest first, so DIR can be removed.
unmount_under() {
  local m
  for m in $(awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m" 2>/dev/null || true; done
}
registry_down() { [ -z "${REGISTRY_PID:-}" ] || kill "$REGISTRY_PID" 2>/dev/null || true; }
# busybox_rootfs DIR: a minimal root file system: busybox-static and its applets, /etc/passwd.
busybox_rootfs() {
  local r=$1
  mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/proc" "$r/sys" "$r/dev" "$r/scratch"
  chmod 1777 "$r/scratch"  # writable by anyone: only a --container-writable overlay lets it be written
  chmod 1777 "$r/tmp"
  cp /bin/busybox "$r/bin/busybox"
  local a
  for a in sh cat id ls echo sleep grep ps touch head wc mkdir env kill true false test stat dd; do ln -sf busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$r/etc/passwd"
}
# mltrain_rootfs DIR MLTRAIN: busybox_rootfs plus mltrain at /usr/local/bin/mltrain and the shared
# libraries ldd lists for it (with the loader), each at its path; the CUDA toolkit under
# /usr/local/cuda is left out: jobs mount the host's, as the GPU driver's libraries are.
mltrain_rootfs() {
  local r=$1 bin=$2 lib
  busybox_rootfs "$r"
  mkdir -p "$r/usr/local/bin"
  cp "$bin" "$r/usr/local/bin/mltrain"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*' | grep -v '^/usr/local/cuda' | sort -u); do
    mkdir -p "$r$(dirname "$lib")"
    cp -L "$lib" "$r$lib"
  done
}
# copy_chain PATH ROOT: copies PATH into ROOT at the same path, and each symlink on the way to its
# target (a library's links stay links, as its loader and Python's ctypes expect them).
copy_chain() {
  local p=$1 r=$2 t
  for _ in 1 2 3 4 5 6 7 8; do
    if [ ! -e "$r$p" ] && [ ! -L "$r$p" ]; then mkdir -p "$r$(dirname "$p")"; cp -P "$p" "$r$p"; fi
    [ -L "$p" ] || return 0
    t=$(readlink "$p")
    case $t in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
  done
}
# torch_rootfs DIR: busybox_rootfs plus Debian's python3 and python3-torch as installed on this
# host: the interpreter, its standard library (without tests, IDLE, tkinter), the torch and numpy
# packages, their extension modules and every shared library ldd lists for them, each at its path
# (~770 MB: Debian's libtorch links OpenCV, Qt and FFmpeg).
torch_rootfs() {
  local r=$1 lib pkg objs sp=/usr/lib/python3/dist-packages
  busybox_rootfs "$r"
  mkdir -p "$r/usr/bin" "$r$sp"
  cp -L /usr/bin/python3.11 "$r/usr/bin/python3.11"
  ln -sf python3.11 "$r/usr/bin/python3"
  tar -C / --exclude='usr/lib/python3.11/test' --exclude='usr/lib/python3.11/idlelib' \
    --exclude='usr/lib/python3.11/tkinter' --exclude='usr/lib/python3.11/ensurepip' \
    --exclude='usr/lib/python3.11/lib2to3' --exclude='__pycache__' -cf - usr/lib/python3.11 | tar -C "$r" -xf -
  for pkg in torch numpy typing_extensions.py six.py; do
    tar -C / --exclude='__pycache__' -cf - "${sp#/}/$pkg" | tar -C "$r" -xf -
  done
  objs=$(find -L "$sp/torch" "$sp/numpy" /usr/lib/python3.11/lib-dynload -name '*.so*' -type f)
  for lib in $objs; do copy_chain "$lib" "$r"; done
  for lib in $( { echo /usr/bin/python3.11; echo "$objs"; } | xargs ldd 2>/dev/null | grep -o '=> /[^ ]*' | cut -c4- | sort -u) \
    /lib64/ld-linux-x86-64.so.2; do
    mkdir -p "$r$(dirname "$lib")"
    [ -e "$r$lib" ] || cp -L "$lib" "$r$lib"
  done
}
# layout_image ROOTFS DIR: packs ROOTFS as an OCI image layout DIR with the tag img (PATH=/bin).
layout_image() {
  local rootfs=$1 layout=$2
  umoci init --layout "$layout" >/dev/null
  umoci new --image "$layout:base" >/dev/null
  umoci insert --image "$layout:base" "$rootfs" / >/dev/null
  umoci config --image "$layout:base" --tag img --config.env PATH=/bin:/usr/bin --config.env IMAGE_ONLY=from-image \
    --config.cmd /bin/sh --config.workingdir / >/dev/null
}
# push_image ROOTFS NAME:TAG: packs ROOTFS as a one-layer OCI image (PATH=/bin) and pushes it to
# $REGISTRY; prints nothing.
push_image() {
  local rootfs=$1 ref=$2 layout="$DIR/layout-$$-$RANDOM"
  umoci init --layout "$layout" >/dev/null
  umoci new --image "$layout:base" >/dev/null
  umoci insert --image "$layout:base" "$rootfs" / >/dev/null
  umoci config --image "$layout:base" --tag img --config.env PATH=/bin:/usr/bin --config.env IMAGE_ONLY=from-image \
    --config.cmd /bin/sh --config.workingdir / >/dev/null
  skopeo copy --quiet --dest-cert-dir "$CERTS" "oci:$layout:img" "docker://$REGISTRY/$ref" >/dev/null
  rm -rf "$layout"
}
