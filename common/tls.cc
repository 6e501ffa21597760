#include "common/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace mlsched {

std::string ResolveClientCaFile() {
  if (const char* env = std::getenv("MLSCHED_TLS_CA"); env && *env) return env;
  return "/etc/mlsched/tls/ca.pem";
}

std::string ReadPemFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string s;
  s.resize(kMaxPemFileBytes + 1);
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  if (s.size() > kMaxPemFileBytes)
    throw std::runtime_error(path + " is larger than " + std::to_string(kMaxPemFileBytes) + " bytes");
  return s;
}

namespace {

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

std::vector<X509Ptr> ReadCerts(const std::string& pem) {
  std::vector<X509Ptr> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) out.emplace_back(x);
  BIO_free(bio);
  return out;
}

bool KeyMatches(X509* cert, const std::string& key_pem) {
  BIO* bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!key) return false;
  bool ok = X509_check_private_key(cert, key) == 1;
  EVP_PKEY_free(key);
  return ok;
}

void ReadNames(X509* cert, CertificateInfo* info) {
  char cn[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0) info->common_name = cn;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
    if (n->type != GEN_DNS) continue;
    const unsigned char* d = ASN1_STRING_get0_data(n->d.dNSName);
    info->dns_names.emplace_back(reinterpret_cast<const char*>(d), static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
  }
  GENERAL_NAMES_free(sans);
  struct tm t {};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(cert), &t) == 1) info->not_after = timegm(&t);
}

}  // namespace

CertificateInfo CheckCertificate(const TlsFiles& files, int64_t now) {
  CertificateInfo info;
  try {
    auto chain = ReadCerts(ReadPemFile(files.cert));
    auto cas = ReadCerts(ReadPemFile(files.ca));
    if (chain.empty()) return info.error = files.cert + ": no PEM certificate in the file", info;
    if (cas.empty()) return info.error = files.ca + ": no PEM CA certificate in the file", info;
    ReadNames(chain.front().get(), &info);
    if (!files.key.empty() && !KeyMatches(chain.front().get(), ReadPemFile(files.key)))
      return info.error = files.key + ": not the private key of " + files.cert, info;
    X509_STORE* store = X509_STORE_new();
    for (auto& c : cas) X509_STORE_add_cert(store, c.get());
    STACK_OF(X509)* untrusted = sk_X509_new_null();
    for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted, chain[i].get());
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, chain.front().get(), untrusted);
    X509_STORE_CTX_set_time(ctx, 0, static_cast<time_t>(now));
    if (X509_verify_cert(ctx) != 1) {
      int err = X509_STORE_CTX_get_error(ctx);
      info.error = files.cert + " (CN=" + info.common_name + "): " + X509_verify_cert_error_string(err);
      if (err == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY || err == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT)
        info.error += " (not issued by the CA in " + files.ca + ")";
    }
    X509_STORE_CTX_free(ctx);
    sk_X509_free(untrusted);
    X509_STORE_free(store);
  } catch (const std::exception& e) {
    info.error = e.what();
  }
  return info;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsFiles& files) {
  namespace ex = grpc::experimental;
  auto provider = std::make_shared<ex::FileWatcherCertificateProvider>(files.key, files.cert, files.ca, kCertRefreshSeconds);
  ex::TlsServerCredentialsOptions opts(provider);
  opts.watch_root_certs();
  opts.watch_identity_key_cert_pairs();
  opts.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return ex::TlsServerCredentials(opts);
}

std::shared_ptr<grpc::ChannelCredentials> MakeTlsChannelCredentials(const TlsFiles& files) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadPemFile(files.ca);
  if (!files.cert.empty()) o.pem_cert_chain = ReadPemFile(files.cert);
  if (!files.key.empty()) o.pem_private_key = ReadPemFile(files.key);
  return grpc::SslCredentials(o);
}

namespace {

std::string SerialHex(const ASN1_INTEGER* serial) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
  if (!bn) return "";
  char* hex = BN_bn2hex(bn);
  std::string out = hex ? hex : "";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

}  // namespace

std::vector<std::string> ReadRevokedSerials(const std::string& crl_file, const std::string& ca_file, bool* expired) {
  const std::string pem = ReadPemFile(crl_file);
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509_CRL* crl = PEM_read_bio_X509_CRL(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (!crl) throw std::runtime_error(crl_file + ": not a PEM certificate revocation list");
  std::unique_ptr<X509_CRL, decltype(&X509_CRL_free)> owned(crl, X509_CRL_free);
  auto cas = ReadCerts(ReadPemFile(ca_file));
  bool signed_by_ca = false;
  for (auto& ca : cas)
    if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca.get())) == 0 &&
        X509_CRL_verify(crl, X509_get0_pubkey(ca.get())) == 1)
      signed_by_ca = true;
  if (!signed_by_ca) throw std::runtime_error(crl_file + ": not signed by the CA in " + ca_file);
  const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl);
  *expired = next && X509_cmp_current_time(next) < 0;
  std::vector<std::string> out;
  STACK_OF(X509_REVOKED)* revoked = X509_CRL_get_REVOKED(crl);
  for (int i = 0; revoked && i < sk_X509_REVOKED_num(revoked); ++i)
    out.push_back(SerialHex(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(revoked, i))));
  return out;
}

std::string CertificateSerial(const std::string& pem) {
  auto certs = ReadCerts(pem);
  return certs.empty() ? "" : SerialHex(X509_get_serialNumber(certs.front().get()));
}

std::vector<std::string> PeerCertificateNames(const grpc::AuthContext& auth) {
  std::vector<std::string> names;
  if (!auth.IsPeerAuthenticated()) return names;
  for (const char* prop : {"x509_common_name", "x509_subject_alternative_name"})
    for (const auto& v : auth.FindPropertyValues(prop)) names.emplace_back(v.data(), v.size());
  return names;
}

}  // namespace mlsched
