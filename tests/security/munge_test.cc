// MUNGE credential checks (common/munge.h) against a private munged.
#include <catch2/catch.hpp>
#include <munge.h>

#include "common/munge.h"
#include "tests/security/fixtures.h"

using namespace mlsched;
using mlsched::testing::PrivateMunged;
using mlsched::testing::TempDir;

TEST_CASE("a credential proves the encoding process's uid and payload, once", "[security][munge]") {
  TempDir dir("mlsched-munge-");
  PrivateMunged munged(dir.path() / "m");
  if (!munged.ok()) {
    WARN("SKIPPED: munged is not installed (apt-get install munge)");
    return;
  }
  std::string cred;
  REQUIRE(MungeEncode(munged.Socket(), "mlsched.v1.JobService/SubmitJob", 0, &cred).ok());
  MungeIdentity id;
  MungeResult r = MungeDecode(munged.Socket(), cred, &id);
  REQUIRE(r.ok());
  CHECK(id.uid == ::getuid());
  CHECK(id.gid == ::getgid());
  CHECK(id.payload == "mlsched.v1.JobService/SubmitJob");

  // The same credential a second time is a replay.
  r = MungeDecode(munged.Socket(), cred, &id);
  CHECK(r.code == EMUNGE_CRED_REPLAYED);
  CHECK_THAT(r.message, Catch::Contains("replayed"));
}

TEST_CASE("expired, foreign-key, garbage and over-long credentials are refused with a clear reason",
          "[security][munge]") {
  TempDir dir("mlsched-munge-");
  PrivateMunged a(dir.path() / "a"), b(dir.path() / "b");
  if (!a.ok() || !b.ok()) {
    WARN("SKIPPED: munged is not installed (apt-get install munge)");
    return;
  }
  MungeIdentity id;

  SECTION("made with another cluster's key") {
    std::string cred;
    REQUIRE(MungeEncode(b.Socket(), "x", 0, &cred).ok());
    MungeResult r = MungeDecode(a.Socket(), cred, &id);
    CHECK(r.code == EMUNGE_CRED_INVALID);
    CHECK_THAT(r.message, Catch::Contains("another key"));
  }
  SECTION("expired") {
    std::string cred;
    REQUIRE(MungeEncode(a.Socket(), "x", 1, &cred).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    MungeResult r = MungeDecode(a.Socket(), cred, &id);
    CHECK(r.code == EMUNGE_CRED_EXPIRED);
    CHECK_THAT(r.message, Catch::Contains("expired"));
  }
  SECTION("garbage, empty and over-long") {
    CHECK_FALSE(MungeDecode(a.Socket(), "MUNGE:not-a-credential:", &id).ok());
    CHECK_THAT(MungeDecode(a.Socket(), "", &id).message, Catch::Contains("missing"));
    MungeResult r = MungeDecode(a.Socket(), std::string(kMaxMungeCredentialBytes + 1, 'A'), &id);
    CHECK(r.code == EMUNGE_BAD_LENGTH);
    CHECK_THAT(r.message, Catch::Contains("exceeds"));
  }
  SECTION("munged not running") {
    MungeResult r = MungeDecode((dir.path() / "nowhere.sock").string(), "MUNGE:x:", &id);
    CHECK(r.code == EMUNGE_SOCKET);
    CHECK_THAT(r.message, Catch::Contains("is munged running"));
    std::string cred;
    CHECK(MungeEncode((dir.path() / "nowhere.sock").string(), "x", 0, &cred).code == EMUNGE_SOCKET);
  }
  SECTION("payload over the limit") {
    std::string cred;
    CHECK(MungeEncode(a.Socket(), std::string(kMaxMungePayloadBytes + 1, 'p'), 0, &cred).code == EMUNGE_BAD_LENGTH);
  }
}
