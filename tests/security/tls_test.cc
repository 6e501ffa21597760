// Certificate checks (common/tls.h) on certificates made by scripts/mlsched-certs.sh, and the CLI channel failing closed.
#include <catch2/catch.hpp>

#include <ctime>

#include "common/client.h"
#include "common/tls.h"
#include "tests/security/fixtures.h"

using namespace mlsched;
using mlsched::testing::MakeCluster;
using mlsched::testing::Sh;
using mlsched::testing::TempDir;

TEST_CASE("node certificates: names, validity, CA and key are checked", "[security][tls]") {
  TempDir dir("mlsched-tls-");
  auto d = dir.path();
  REQUIRE(MakeCluster(d / "a", {"n1"}));
  REQUIRE(MakeCluster(d / "b", {"n1"}));  // another CA issuing a certificate for the same name
  auto a = d / "a";
  const int64_t now = std::time(nullptr);

  CertificateInfo ok = CheckCertificate({(a / "ca.pem").string(), (a / "nodes/n1.pem").string(), (a / "nodes/n1.key").string()}, now);
  CHECK(ok.ok());
  CHECK(ok.common_name == "n1");
  CHECK(ok.dns_names == std::vector<std::string>{"n1"});
  CHECK(ok.not_after > now + 800LL * 86400);

  CertificateInfo srv = CheckCertificate({(a / "ca.pem").string(), (a / "schedd.pem").string(), ""}, now);
  CHECK(srv.ok());
  CHECK(srv.common_name == "localhost");

  SECTION("issued by another CA") {
    auto r = CheckCertificate({(a / "ca.pem").string(), (d / "b/nodes/n1.pem").string(), ""}, now);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.error, Catch::Contains("not issued by the CA"));
  }
  SECTION("expired") {
    auto r = CheckCertificate({(a / "ca.pem").string(), (a / "nodes/n1.pem").string(), ""}, now + 900LL * 86400);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.error, Catch::Contains("expired"));
  }
  SECTION("not yet valid") {
    auto r = CheckCertificate({(a / "ca.pem").string(), (a / "nodes/n1.pem").string(), ""}, now - 86400);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.error, Catch::Contains("not yet valid"));
  }
  SECTION("a key that is not the certificate's") {
    auto r = CheckCertificate({(a / "ca.pem").string(), (a / "nodes/n1.pem").string(), (a / "schedd.key").string()}, now);
    CHECK_FALSE(r.ok());
    CHECK_THAT(r.error, Catch::Contains("not the private key"));
  }
  SECTION("missing and non-PEM files") {
    CHECK_THAT(CheckCertificate({(a / "ca.pem").string(), (d / "nope.pem").string(), ""}, now).error,
               Catch::Contains("cannot read"));
    std::ofstream(d / "junk.pem") << "hello";
    CHECK_THAT(CheckCertificate({(a / "ca.pem").string(), (d / "junk.pem").string(), ""}, now).error,
               Catch::Contains("no PEM certificate"));
  }
  SECTION("an over-long file") {
    std::ofstream(d / "big.pem") << std::string(kMaxPemFileBytes + 10, 'x');
    CHECK_THAT(CheckCertificate({(a / "ca.pem").string(), (d / "big.pem").string(), ""}, now).error,
               Catch::Contains("larger than"));
  }
}

TEST_CASE("the certificate script refuses bad node names and keeps keys private", "[security][tls]") {
  TempDir dir("mlsched-tls-");
  auto d = dir.path().string();
  REQUIRE(Sh("bash " + mlsched::testing::CertScript() + " " + d + " ca >/dev/null"));
  CHECK_FALSE(Sh("bash " + mlsched::testing::CertScript() + " " + d + " node '../etc' 2>/dev/null"));
  CHECK_FALSE(Sh("bash " + mlsched::testing::CertScript() + " " + d + " ca 2>/dev/null"));  // never overwrites the CA
  REQUIRE(Sh("bash " + mlsched::testing::CertScript() + " " + d + " node n7 >/dev/null"));
  struct stat st {};
  REQUIRE(::stat((dir.path() / "nodes/n7.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0077) == 0);
}

namespace {

/// Revokes `node`'s certificate of the cluster in `dir` and writes DIR/crl.pem with openssl's own
/// `ca` command (a minimal config and index in DIR/crl-db), signed by `signer` (a cluster dir).
bool RevokeWithOpenssl(const std::filesystem::path& dir, const std::string& node, const std::filesystem::path& signer) {
  const auto db = dir / "crl-db";
  std::filesystem::create_directories(db);
  std::ofstream(db / "index.txt").close();
  std::ofstream(db / "openssl.cnf") << "[ca]\ndefault_ca = c\n[c]\ndatabase = " << (db / "index.txt").string()
                                    << "\ndefault_md = sha256\ndefault_crl_days = 30\n";
  const std::string ca = " -config " + (db / "openssl.cnf").string() + " -cert " + (signer / "ca.pem").string() +
                         " -keyfile " + (signer / "ca.key").string();
  return Sh("openssl ca" + ca + " -revoke " + (dir / "nodes" / (node + ".pem")).string() + " 2>/dev/null") &&
         Sh("openssl ca" + ca + " -gencrl -out " + (dir / "crl.pem").string() + " 2>/dev/null");
}

}  // namespace

TEST_CASE("a CRL signed by the cluster CA revokes node certificates by serial, a foreign one is refused",
          "[security][tls]") {
  TempDir dir("mlsched-crl-");
  auto d = dir.path();
  REQUIRE(MakeCluster(d / "a", {"n1", "n2"}));
  REQUIRE(MakeCluster(d / "b", {"n1"}));
  auto a = d / "a";
  REQUIRE(RevokeWithOpenssl(a, "n1", a));
  bool expired = true;
  auto serials = ReadRevokedSerials((a / "crl.pem").string(), (a / "ca.pem").string(), &expired);
  CHECK_FALSE(expired);
  REQUIRE(serials.size() == 1);
  const std::string n1 = CertificateSerial(ReadPemFile((a / "nodes/n1.pem").string()));
  const std::string n2 = CertificateSerial(ReadPemFile((a / "nodes/n2.pem").string()));
  CHECK(serials[0] == n1);
  CHECK_FALSE(n2.empty());
  CHECK(n2 != n1);
  // A CRL made by another CA (an attacker's, to un-revoke or to revoke at will) is refused.
  REQUIRE(RevokeWithOpenssl(d / "b", "n1", d / "b"));
  CHECK_THROWS_WITH(ReadRevokedSerials((d / "b/crl.pem").string(), (a / "ca.pem").string(), &expired),
                    Catch::Contains("not signed by the CA"));
  std::ofstream(d / "junk.pem") << "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n";
  CHECK_THROWS_WITH(ReadRevokedSerials((d / "junk.pem").string(), (a / "ca.pem").string(), &expired),
                    Catch::Contains("not a PEM certificate revocation list"));
  CHECK(CertificateSerial("junk").empty());
}

TEST_CASE("the CLI's channel on TCP is TLS or nothing: an unreadable CA file is an error, never plaintext",
          "[security][tls]") {
  TempDir dir("mlsched-tls-");
  const char* saved = std::getenv("MLSCHED_TLS_CA");
  const std::string previous = saved ? saved : "";
  const std::string missing = (dir.path() / "ca.pem").string();
  ::setenv("MLSCHED_TLS_CA", missing.c_str(), 1);
  CHECK_THROWS_WITH(MakeChannel("127.0.0.1:7070"), Catch::Contains("cannot read " + missing));
  CHECK(MakeChannel("unix:" + (dir.path() / "schedd.sock").string()) != nullptr);  // the kernel names the caller there
  if (saved) ::setenv("MLSCHED_TLS_CA", previous.c_str(), 1);
  else ::unsetenv("MLSCHED_TLS_CA");
}
