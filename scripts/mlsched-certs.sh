#!/usr/bin/env bash
# Makes the cluster's TLS material with Debian's openssl (EC P-256 keys, SHA-256):
#   mlsched-certs.sh DIR ca                      DIR/ca.pem, DIR/ca.key (the cluster CA; keep ca.key offline)
#   mlsched-certs.sh DIR schedd HOST [NAME...]   DIR/schedd.pem, DIR/schedd.key: CN=HOST, subjectAltName
#                                                DNS:HOST, DNS:localhost, IP:127.0.0.1 and each NAME
#                                                (a DNS name or an IP address) clients dial
#   mlsched-certs.sh DIR node NODE               DIR/nodes/NODE.pem, DIR/nodes/NODE.key: CN=NODE, DNS:NODE
#                                                (agentd --name NODE presents it; schedd binds the
#                                                session to that name)
#   mlsched-certs.sh DIR revoke NODE             revokes DIR/nodes/NODE.pem (its serial goes into the
#                                                index in DIR/revocation/) and rewrites DIR/crl.pem
#   mlsched-certs.sh DIR crl                     rewrites DIR/crl.pem, the CRL signed by the cluster CA
#                                                (schedd --tls-crl; valid 90 days: renew before then)
# etcd has its own CA: a certificate of the cluster CA (every node has one) must not open etcd.
#   mlsched-certs.sh DIR etcd-ca                 DIR/etcd/ca.pem, DIR/etcd/ca.key (the etcd CA)
#   mlsched-certs.sh DIR etcd-member NAME HOST...
#                                                DIR/etcd/NAME.pem, .key: a member's server and peer
#                                                certificate (serverAuth, clientAuth); CN=NAME,
#                                                subjectAltName each HOST (DNS name or IP), DNS:localhost,
#                                                IP:127.0.0.1 and DNS:member.etcd.mlsched, the name
#                                                members require of each other (etcd
#                                                --peer-cert-allowed-hostname member.etcd.mlsched)
#   mlsched-certs.sh DIR etcd-client NAME        DIR/etcd/clients/NAME.pem, .key: clientAuth, CN=NAME
#                                                (schedd --etcd-tls-cert; with etcd's auth enabled the
#                                                CN is the etcd user)
# Options (after the command): --days N (validity, default 825; a CRL's, default 90). Keys are
# created mode 0600; names are [A-Za-z0-9._-], at most 64 bytes, starting with a letter or digit.
# Rotation: make new files beside the old ones and move them into place; schedd re-reads its
# files every 10 s, agentd at its next reconnect (docs/operations.md, "Security model").
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,31p' "$0" >&2; exit 2; }
dir=$1; what=$2; shift 2
days="" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --days)
      [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]{0,4}$ ]] || { echo "--days needs a number of days (1-99999)" >&2; exit 2; }
      days=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
cert_days=${days:-825} crl_days=${days:-90}
mkdir -p "$dir"
umask 077

die() { echo "$*" >&2; exit 2; }
# A certificate or file name: it ends up in a path and in a subject, so nothing else gets through.
check_name() {
  [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || die "name '$1' must be [A-Za-z0-9._-], at most 64 bytes, starting with a letter or digit"
}
# A subjectAltName entry for a DNS name or an IP address (v4 or v6); anything else is refused.
san_of() {
  local h=$1 label='[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?'
  if [[ $h =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]]; then
    for o in "${BASH_REMATCH[@]:1}"; do [ "$((10#$o))" -le 255 ] || die "'$h' is not an IPv4 address"; done
    echo "IP:$h"
  elif [[ $h == *:* ]]; then
    [[ $h =~ ^[0-9A-Fa-f:.]{2,45}$ ]] || die "'$h' is not an IPv6 address"
    echo "IP:$h"
  elif [[ ${#h} -le 253 && $h =~ ^$label(\.$label)*$ ]]; then
    echo "DNS:$h"
  else
    die "'$h' is neither a DNS name nor an IP address"
  fi
}

# sign CA_DIR CN SANS EKU OUT_BASE: a key and a certificate signed by CA_DIR/ca.{pem,key}
# (SANS may be empty: no subjectAltName).
sign() {
  local ca=$1 cn=$2 sans=$3 eku=$4 out=$5 ext
  local make=ca
  [ "$ca" = "$dir" ] || make=etcd-ca
  [ -f "$ca/ca.pem" ] && [ -f "$ca/ca.key" ] || { echo "no CA in $ca: run '$0 $dir $make' first" >&2; exit 1; }
  ext=$(mktemp)
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n' "$eku" > "$ext"
  [ -z "$sans" ] || printf 'subjectAltName=%s\n' "$sans" >> "$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out.key" \
    -subj "/O=mlsched/CN=$cn" -out "$out.csr" 2>/dev/null
  openssl x509 -req -in "$out.csr" -CA "$ca/ca.pem" -CAkey "$ca/ca.key" -CAcreateserial -days "$cert_days" \
    -sha256 -extfile "$ext" -out "$out.pem" 2>/dev/null
  rm -f "$out.csr" "$ext"
  chmod 0600 "$out.key"
  chmod 0644 "$out.pem"
  echo "$out.pem (CN=$cn${sans:+, $sans}, $cert_days days)"
}

# make_ca CA_DIR SUBJECT_CN: a self-signed CA (refuses to overwrite a key).
make_ca() {
  local ca=$1 cn=$2
  [ -f "$ca/ca.key" ] && { echo "$ca/ca.key exists; not overwriting" >&2; exit 1; }
  mkdir -p "$ca"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$ca/ca.key" \
    -subj "/O=mlsched/CN=$cn" -days "$cert_days" -sha256 -out "$ca/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 0600 "$ca/ca.key"
  chmod 0644 "$ca/ca.pem"
  echo "$ca/ca.pem ($cn, $cert_days days)"
}

# Revocation: `openssl ca` keeps the revoked serials in DIR/revocation/index.txt (its database;
# the certificates themselves were not issued through it) and signs the CRL with the cluster CA.
rev="$dir/revocation"
revocation_db() {
  [ -f "$dir/ca.pem" ] && [ -f "$dir/ca.key" ] || { echo "no CA in $dir: run '$0 $dir ca' first" >&2; exit 1; }
  mkdir -p "$rev"
  [ -f "$rev/index.txt" ] || : > "$rev/index.txt"
  [ -f "$rev/index.txt.attr" ] || echo 'unique_subject = no' > "$rev/index.txt.attr"
  [ -f "$rev/crlnumber" ] || echo 01 > "$rev/crlnumber"
  cat > "$rev/openssl.cnf" <<CNF
[ ca ]
default_ca = mlsched
[ mlsched ]
database = $rev/index.txt
crlnumber = $rev/crlnumber
default_md = sha256
crl_extensions = crl_ext
[ crl_ext ]
authorityKeyIdentifier = keyid:always
CNF
}
# gencrl: DIR/crl.pem from the index, written beside it and renamed (readers never see half a file).
gencrl() {
  local tmp n next
  tmp=$(mktemp "$dir/.crl.XXXXXX")
  openssl ca -batch -config "$rev/openssl.cnf" -gencrl -keyfile "$dir/ca.key" -cert "$dir/ca.pem" \
    -crldays "$crl_days" -out "$tmp" 2>"$tmp.err" || { cat "$tmp.err" >&2; rm -f "$tmp" "$tmp.err"; exit 1; }
  rm -f "$tmp.err"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$dir/crl.pem"
  n=$(awk -F'\t' '$1 == "R"' "$rev/index.txt" | wc -l)
  next=$(openssl crl -in "$dir/crl.pem" -noout -nextupdate | cut -d= -f2)
  echo "$dir/crl.pem ($n revoked, next update $next)"
}
# The serial of a certificate as `openssl ca` writes it in the index: upper-case hex, no leading zeros.
serial_of() { openssl x509 -in "$1" -noout -serial | cut -d= -f2 | tr a-f A-F | sed 's/^0*//'; }

case "$what" in
  ca)
    [ ${#args[@]} -eq 0 ] || die "usage: $0 DIR ca"
    make_ca "$dir" "mlsched cluster CA"
    ;;
  schedd)
    [ ${#args[@]} -ge 1 ] || die "usage: $0 DIR schedd HOST [NAME...]"
    [[ $(san_of "${args[0]}") == DNS:* ]] || die "schedd HOST '${args[0]}' must be a DNS name (IP addresses go after it)"
    sans="DNS:${args[0]},DNS:localhost,IP:127.0.0.1"
    for n in "${args[@]:1}"; do sans+=",$(san_of "$n")"; done
    sign "$dir" "${args[0]}" "$sans" serverAuth "$dir/schedd"
    ;;
  node)
    [ ${#args[@]} -eq 1 ] || die "usage: $0 DIR node NODE"
    [[ ${args[0]} =~ ^[A-Za-z0-9._-]+$ ]] || die "node name '${args[0]}' must be [A-Za-z0-9._-]+"
    mkdir -p "$dir/nodes"
    sign "$dir" "${args[0]}" "DNS:${args[0]}" clientAuth "$dir/nodes/${args[0]}"
    ;;
  revoke)
    [ ${#args[@]} -eq 1 ] || die "usage: $0 DIR revoke NODE"
    [[ ${args[0]} =~ ^[A-Za-z0-9._-]+$ ]] || die "node name '${args[0]}' must be [A-Za-z0-9._-]+"
    cert="$dir/nodes/${args[0]}.pem"
    [ -f "$cert" ] || { echo "no certificate $cert to revoke" >&2; exit 1; }
    openssl verify -no_check_time -CAfile "$dir/ca.pem" "$cert" >/dev/null 2>&1 ||
      { echo "$cert was not issued by $dir/ca.pem; not revoking" >&2; exit 1; }
    revocation_db
    exec 9> "$rev/lock"
    flock 9
    serial=$(serial_of "$cert")
    if awk -F'\t' -v s="$serial" '$1 == "R" { x = toupper($4); sub(/^0+/, "", x); if (x == s) f = 1 } END { exit !f }' "$rev/index.txt"; then
      echo "${args[0]}: serial $serial was already revoked"
    else
      openssl ca -batch -config "$rev/openssl.cnf" -revoke "$cert" -keyfile "$dir/ca.key" -cert "$dir/ca.pem" \
        2>"$rev/last.err" || { cat "$rev/last.err" >&2; exit 1; }
      cp "$cert" "$rev/${args[0]}-$serial.pem"
      echo "${args[0]}: serial $serial revoked"
    fi
    gencrl
    ;;
  crl)
    [ ${#args[@]} -eq 0 ] || die "usage: $0 DIR crl"
    revocation_db
    exec 9> "$rev/lock"
    flock 9
    gencrl
    ;;
  etcd-ca)
    [ ${#args[@]} -eq 0 ] || die "usage: $0 DIR etcd-ca"
    make_ca "$dir/etcd" "mlsched etcd CA"
    ;;
  etcd-member)
    [ ${#args[@]} -ge 2 ] || die "usage: $0 DIR etcd-member NAME HOST_OR_IP..."
    check_name "${args[0]}"
    sans="DNS:member.etcd.mlsched,DNS:localhost,IP:127.0.0.1"
    for h in "${args[@]:1}"; do
      s=$(san_of "$h")
      [[ ",$sans," == *",$s,"* ]] || sans+=",$s"
    done
    sign "$dir/etcd" "${args[0]}" "$sans" serverAuth,clientAuth "$dir/etcd/${args[0]}"
    ;;
  etcd-client)
    [ ${#args[@]} -eq 1 ] || die "usage: $0 DIR etcd-client NAME"
    check_name "${args[0]}"
    mkdir -p "$dir/etcd/clients"
    sign "$dir/etcd" "${args[0]}" "" clientAuth "$dir/etcd/clients/${args[0]}"
    ;;
  *) die "unknown command '$what' (ca, schedd, node, revoke, crl, etcd-ca, etcd-member, etcd-client)" ;;
esac
