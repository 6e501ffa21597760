#!/usr/bin/env bash
# Makes the cluster's TLS material with Debian's openssl (EC P-256 keys, SHA-256):
#   mlsched-certs.sh DIR ca                      DIR/ca.pem, DIR/ca.key (the cluster CA; keep ca.key offline)
#   mlsched-certs.sh DIR schedd HOST [NAME...]   DIR/schedd.pem, DIR/schedd.key: CN=HOST, subjectAltName
#                                                DNS:HOST, DNS:localhost, IP:127.0.0.1 and each NAME
#                                                (a DNS name or an IP address) clients dial
#   mlsched-certs.sh DIR node NODE               DIR/nodes/NODE.pem, DIR/nodes/NODE.key: CN=NODE, DNS:NODE
#                                                (agentd --name NODE presents it; schedd binds the
#                                                session to that name)
# Options (after the command): --days N (validity, default 825). Keys are created mode 0600.
# Rotation: make new files beside the old ones and move them into place; schedd re-reads its
# files every 10 s, agentd at its next reconnect (docs/operations.md, "Security model").
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
dir=$1; what=$2; shift 2
days=825
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --days) days=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
mkdir -p "$dir"
umask 077

# sign NAME CN SANS EKU OUT_BASE: a key and a certificate signed by the CA.
sign() {
  local cn=$1 sans=$2 eku=$3 out=$4 ext
  [ -f "$dir/ca.pem" ] && [ -f "$dir/ca.key" ] || { echo "no CA in $dir: run '$0 $dir ca' first" >&2; exit 1; }
  ext=$(mktemp)
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$sans" > "$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out.key" \
    -subj "/O=mlsched/CN=$cn" -out "$out.csr" 2>/dev/null
  openssl x509 -req -in "$out.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days "$days" \
    -sha256 -extfile "$ext" -out "$out.pem" 2>/dev/null
  rm -f "$out.csr" "$ext"
  chmod 0644 "$out.pem"
  echo "$out.pem (CN=$cn, $sans, $days days)"
}

case "$what" in
  ca)
    [ -f "$dir/ca.key" ] && { echo "$dir/ca.key exists; not overwriting" >&2; exit 1; }
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/ca.key" \
      -subj "/O=mlsched/CN=mlsched cluster CA" -days "$days" -sha256 -out "$dir/ca.pem" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    chmod 0644 "$dir/ca.pem"
    echo "$dir/ca.pem (cluster CA, $days days)"
    ;;
  schedd)
    [ ${#args[@]} -ge 1 ] || { echo "usage: $0 DIR schedd HOST [NAME...]" >&2; exit 2; }
    sans="DNS:${args[0]},DNS:localhost,IP:127.0.0.1"
    for n in "${args[@]:1}"; do
      if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then sans+=",IP:$n"; else sans+=",DNS:$n"; fi
    done
    sign "${args[0]}" "$sans" serverAuth "$dir/schedd"
    ;;
  node)
    [ ${#args[@]} -eq 1 ] || { echo "usage: $0 DIR node NODE" >&2; exit 2; }
    [[ ${args[0]} =~ ^[A-Za-z0-9._-]+$ ]] || { echo "node name '${args[0]}' must be [A-Za-z0-9._-]+" >&2; exit 2; }
    mkdir -p "$dir/nodes"
    sign "${args[0]}" "DNS:${args[0]}" clientAuth "$dir/nodes/${args[0]}"
    ;;
  *) echo "unknown command '$what' (ca, schedd, node)" >&2; exit 2 ;;
esac
