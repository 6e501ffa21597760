#!/usr/bin/env bash
# scripts/mlsched-certs.sh with openssl as the judge (no daemon): etcd's own CA and its member and
# client certificates (chains, key usages, names; a cluster-CA certificate does not chain to the
# etcd CA and the reverse), hostile names and hosts refused with nothing written, key modes, and
# node certificate revocation (revoke, crl): `openssl verify -crl_check` refuses a revoked node
# certificate and accepts the others and a reissued one; revoking twice, concurrently or a
# certificate of another CA.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CERTS="$ROOT/scripts/mlsched-certs.sh"
D=$(mktemp -d /tmp/mlsched-certs-test.XXXXXX)
trap 'rm -rf "$D"' EXIT
T="$D/tls"
failures=0
check() {  # DESCRIPTION COMMAND...: the command must succeed
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
refuse() {  # DESCRIPTION COMMAND...: the command must fail
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "FAIL $what (accepted)"; failures=$((failures + 1)); else echo "ok   $what"; fi
}
mode() { stat -c %a "$1"; }
ext() { openssl x509 -in "$1" -noout -ext "$2" 2>/dev/null; }
verify() {  # CAFILE CERT [openssl verify options...]
  local ca=$1 cert=$2; shift 2
  openssl verify "$@" -CAfile "$ca" "$cert"
}

bash "$CERTS" "$T" ca >/dev/null
bash "$CERTS" "$T" node n1 >/dev/null
bash "$CERTS" "$T" node n2 >/dev/null
check "etcd-ca makes tls/etcd/ca.pem" bash "$CERTS" "$T" etcd-ca
refuse "etcd-ca never overwrites the etcd CA" bash "$CERTS" "$T" etcd-ca
check "etcd-member with a DNS name, an IPv4 and an IPv6 address" bash "$CERTS" "$T" etcd-member e1 etcd1.example.internal 10.1.2.3 fd00::1
check "etcd-client" bash "$CERTS" "$T" etcd-client mlsched-schedd

# Separate CAs: the etcd certificates chain only to the etcd CA, the node certificates only to the
# cluster CA (etcd --trusted-ca-file is the etcd CA, so no node certificate opens etcd).
check "member certificate chains to the etcd CA" verify "$T/etcd/ca.pem" "$T/etcd/e1.pem"
refuse "member certificate does not chain to the cluster CA" verify "$T/ca.pem" "$T/etcd/e1.pem"
check "client certificate chains to the etcd CA (TLS client)" verify "$T/etcd/ca.pem" "$T/etcd/clients/mlsched-schedd.pem" -purpose sslclient
refuse "client certificate is no TLS server certificate" verify "$T/etcd/ca.pem" "$T/etcd/clients/mlsched-schedd.pem" -purpose sslserver
refuse "node certificate does not chain to the etcd CA" verify "$T/etcd/ca.pem" "$T/nodes/n1.pem"
refuse "etcd CA and cluster CA differ" cmp -s "$T/ca.pem" "$T/etcd/ca.pem"
check "member certificate is a TLS server (client port, peer port)" verify "$T/etcd/ca.pem" "$T/etcd/e1.pem" -purpose sslserver
check "member certificate is a TLS client (peer connections)" verify "$T/etcd/ca.pem" "$T/etcd/e1.pem" -purpose sslclient
sans=$(ext "$T/etcd/e1.pem" subjectAltName)
for want in "DNS:member.etcd.mlsched" "DNS:localhost" "IP Address:127.0.0.1" "DNS:etcd1.example.internal" \
            "IP Address:10.1.2.3" "IP Address:FD00:0:0:0:0:0:0:1"; do
  check "member certificate names $want" grep -qiF "$want" <<<"$sans"
done
check "member CN is its name" grep -q 'CN *= *e1$' <<<"$(openssl x509 -in "$T/etcd/e1.pem" -noout -subject)"
check "client CN is the etcd user" grep -q 'CN *= *mlsched-schedd$' <<<"$(openssl x509 -in "$T/etcd/clients/mlsched-schedd.pem" -noout -subject)"
# No subjectAltName: a client certificate cannot pass etcd --peer-cert-allowed-hostname.
refuse "client certificate has no subjectAltName" grep -q . <<<"$(ext "$T/etcd/clients/mlsched-schedd.pem" subjectAltName)"
for k in "$T/etcd/ca.key" "$T/etcd/e1.key" "$T/etcd/clients/mlsched-schedd.key" "$T/ca.key" "$T/nodes/n1.key"; do
  check "$(basename "$k") is 0600" test "$(mode "$k")" = 600
done
check "etcd/ is not readable by others" test "$(mode "$T/etcd")" = 700
check "certificates are 0644" test "$(mode "$T/etcd/e1.pem")" = 644

# Hostile names and hosts: refused with exit 2, and no file appears.
before=$(find "$D" | sort)
refuse "etcd-client name with a slash" bash "$CERTS" "$T" etcd-client ../../x
refuse "etcd-client name starting with a dot" bash "$CERTS" "$T" etcd-client .hidden
refuse "etcd-client name starting with a dash" bash "$CERTS" "$T" etcd-client -x
refuse "etcd-client name with a comma" bash "$CERTS" "$T" etcd-client 'a,b'
refuse "etcd-client name with a subject injection" bash "$CERTS" "$T" etcd-client 'a/CN=root'
refuse "etcd-client name of 65 bytes" bash "$CERTS" "$T" etcd-client "$(printf 'a%.0s' $(seq 1 65))"
refuse "etcd-client with two names" bash "$CERTS" "$T" etcd-client a b
refuse "etcd-member without a host" bash "$CERTS" "$T" etcd-member e2
refuse "etcd-member host with a subjectAltName injection" bash "$CERTS" "$T" etcd-member e2 'h,IP:10.0.0.9'
refuse "etcd-member host with a space" bash "$CERTS" "$T" etcd-member e2 'h x'
refuse "etcd-member IPv4 octet over 255" bash "$CERTS" "$T" etcd-member e2 10.0.0.256
refuse "etcd-member wildcard host" bash "$CERTS" "$T" etcd-member e2 '*.example'
refuse "schedd host with a subject injection" bash "$CERTS" "$T" schedd 'x/CN=y'
refuse "schedd extra name with a subjectAltName injection" bash "$CERTS" "$T" schedd localhost 'a,DNS:evil'
refuse "--days not a number" bash "$CERTS" "$T" etcd-client c1 --days 1x
refuse "--days without a value" bash "$CERTS" "$T" etcd-client c1 --days
refuse "revoke a node name with a slash" bash "$CERTS" "$T" revoke ../ca
check "nothing was written by the refused commands" test "$(find "$D" | sort)" = "$before"
code=0; bash "$CERTS" "$T" etcd-client 'a,b' >/dev/null 2>&1 || code=$?
check "a refused name exits 2 (usage)" test "$code" = 2

# Revocation.
serial() { openssl x509 -in "$1" -noout -serial | cut -d= -f2; }
revoked_serials() { openssl crl -in "$T/crl.pem" -noout -text | awk '/Serial Number:/ { print $3 }' | sort; }
crl_number() { echo $(( $(openssl crl -in "$T/crl.pem" -noout -crlnumber | cut -d= -f2) )); }  # 0x.. -> decimal
chain() { cat "$T/ca.pem" "$T/crl.pem" > "$D/chain.pem"; }
s1=$(serial "$T/nodes/n1.pem")
check "revoke n1" bash "$CERTS" "$T" revoke n1
check "crl.pem is 0644" test "$(mode "$T/crl.pem")" = 644
check "the CRL is signed by the cluster CA" openssl crl -in "$T/crl.pem" -CAfile "$T/ca.pem" -noout
refuse "the CRL is not signed by the etcd CA" openssl crl -in "$T/crl.pem" -CAfile "$T/etcd/ca.pem" -noout
check "the CRL lists exactly n1's serial" test "$(revoked_serials)" = "$s1"
chain
refuse "openssl verify -crl_check refuses n1" verify "$D/chain.pem" "$T/nodes/n1.pem" -crl_check
check "openssl verify -crl_check accepts n2" verify "$D/chain.pem" "$T/nodes/n2.pem" -crl_check
check "n1's refusal says revoked" grep -q 'certificate revoked' <<<"$(verify "$D/chain.pem" "$T/nodes/n1.pem" -crl_check 2>&1 || true)"
n=$(crl_number)
check "revoking n1 again succeeds" bash "$CERTS" "$T" revoke n1
check "... and lists it once" test "$(revoked_serials)" = "$s1"
m=$(crl_number)
check "... in a newer CRL" test "$m" -gt "$n"
bash "$CERTS" "$T" node n1 >/dev/null
chain
check "a reissued n1 certificate is accepted" verify "$D/chain.pem" "$T/nodes/n1.pem" -crl_check
refuse "the reissued n1 certificate has a new serial" test "$(serial "$T/nodes/n1.pem")" = "$s1"
bash "$CERTS" "$T" node n3 >/dev/null
bash "$CERTS" "$T" node n4 >/dev/null
bash "$CERTS" "$T" revoke n3 >/dev/null & p1=$!
bash "$CERTS" "$T" revoke n4 >/dev/null & p2=$!
check "two concurrent revocations succeed" wait "$p1" "$p2"
check "... and the CRL lists both and n1's old serial" test "$(revoked_serials | wc -l)" = 3
chain
refuse "n3 refused" verify "$D/chain.pem" "$T/nodes/n3.pem" -crl_check
refuse "n4 refused" verify "$D/chain.pem" "$T/nodes/n4.pem" -crl_check
check "n2 still accepted" verify "$D/chain.pem" "$T/nodes/n2.pem" -crl_check
# A certificate of another CA placed under nodes/ is not revoked (its serial means nothing here).
bash "$CERTS" "$D/other" ca >/dev/null
bash "$CERTS" "$D/other" node n5 >/dev/null
cp "$D/other/nodes/n5.pem" "$T/nodes/n5.pem"
refuse "revoke refuses a certificate of another CA" bash "$CERTS" "$T" revoke n5
refuse "revoke refuses a node without a certificate" bash "$CERTS" "$T" revoke n9
check "the CRL still lists 3" test "$(revoked_serials | wc -l)" = 3
# crl renews the CRL with the same entries; --days sets its validity (90 days by default).
days_left() { echo $(( ($(date -d "$(openssl crl -in "$T/crl.pem" -noout -nextupdate | cut -d= -f2)" +%s) - $(date +%s) + 3600) / 86400 )); }
d=$(days_left)
check "the CRL's default validity is 90 days" test "$d" -eq 90
check "crl --days 7" bash "$CERTS" "$T" crl --days 7
d=$(days_left)
check "... is valid 7 days" test "$d" -eq 7
check "... with the same 3 entries" test "$(revoked_serials | wc -l)" = 3
refuse "crl without a CA" bash "$CERTS" "$D/empty" crl

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "passed"
