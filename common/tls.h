// TLS for every TCP connection to schedd (gRPC over OpenSSL): schedd proves itself with a
// certificate from the cluster CA; agents prove which node they are with a node certificate from
// the same CA (mutual TLS); CLI users need only the CA (they prove who they are with MUNGE).
// scripts/mlsched-certs.sh makes the CA and the certificates with Debian's openssl.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlsched {

/// Largest PEM file read (bytes): a CA bundle or certificate chain is a few KiB.
inline constexpr size_t kMaxPemFileBytes = 1 << 20;
/// Seconds between checks of the certificate files for changes (rotation without a restart).
inline constexpr unsigned kCertRefreshSeconds = 10;

/// PEM file paths. `cert`/`key` may be empty where no identity is presented (CLI users).
struct TlsFiles {
  std::string ca;    // the cluster CA certificate(s) that peers must chain to
  std::string cert;  // this side's certificate chain
  std::string key;   // this side's private key
};

/// The CLI's CA file: $MLSCHED_TLS_CA, else /etc/mlsched/tls/ca.pem.
std::string ResolveClientCaFile();

/// Reads a PEM file (<= kMaxPemFileBytes). Throws std::runtime_error naming the file and the reason.
std::string ReadPemFile(const std::string& path);

/// What a certificate says about its holder, after checking it against the CA.
struct CertificateInfo {
  std::string common_name;
  std::vector<std::string> dns_names;  // subjectAltName DNS entries
  int64_t not_after = 0;               // seconds since the epoch
  std::string error;                   // "" when the certificate is valid now and chains to the CA
  bool ok() const { return error.empty(); }
};

/// Checks `files.cert` against `files.ca` at time `now` (seconds since the epoch): parse errors,
/// not yet valid, expired, issued by another CA, and (when `files.key` is set) a key that does not
/// match. `error` says which, naming the file.
CertificateInfo CheckCertificate(const TlsFiles& files, int64_t now);

/// Server credentials for a TCP listener: this side's key and certificate, clients' certificates
/// requested and verified against the CA when presented (agents), optional (CLI users). The files
/// are re-read every kCertRefreshSeconds, so replaced certificates take effect without a restart.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsFiles& files);

/// Channel credentials: verify the server against `files.ca` (and its name against the address),
/// presenting `files.cert`/`files.key` when set. Throws std::runtime_error when a file is unreadable.
std::shared_ptr<grpc::ChannelCredentials> MakeTlsChannelCredentials(const TlsFiles& files);

/// Serial numbers (upper-case hex, no leading zeros) the CRL in `crl_file` (PEM) revokes, after
/// checking that it is signed by the CA in `ca_file` and names it as issuer. An expired CRL
/// (nextUpdate passed) is still read; `*expired` says so. Throws std::runtime_error naming the
/// file and the problem.
std::vector<std::string> ReadRevokedSerials(const std::string& crl_file, const std::string& ca_file, bool* expired);

/// The serial number (upper-case hex, as ReadRevokedSerials) of the first certificate in `pem`;
/// "" when it does not parse.
std::string CertificateSerial(const std::string& pem);

/// The names a verified peer certificate gives (common name, then DNS subjectAltNames); empty
/// when the peer presented no certificate or the connection is not TLS.
std::vector<std::string> PeerCertificateNames(const grpc::AuthContext& auth);

}  // namespace mlsched
