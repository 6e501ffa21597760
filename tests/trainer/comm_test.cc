// The rendezvous store and the Gloo communicator, with ranks as threads of this process.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <latch>
#include <sstream>
#include <thread>

#include "tests/trainer/test_util.h"
#include "trainer/communicator.h"
#include "trainer/kv_store.h"
#include "trainer/log.h"
#include "trainer/sampler.h"

using namespace mltrain;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "comm-test-token-0123456789abcdef";

RendezvousEnv Env(int rank, int world, int port, const std::string& attempt = "1", const std::string& token = kToken) {
  RendezvousEnv e;
  e.rank = rank;
  e.world_size = world;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.job_id = "comm-test";
  e.attempt = attempt;
  e.token = token;
  return e;
}

CommunicatorOptions Options(std::chrono::milliseconds timeout) {
  CommunicatorOptions o;
  o.rendezvous_timeout = timeout;
  o.collective_timeout = timeout;
  return o;
}

/// Runs body(comm) on `world` ranks (threads); rethrows the first failure.
void OnRanks(int world, const std::function<void(Communicator&)>& body, const std::string& algorithm = "ring") {
  int port = testing::FreePort();
  std::vector<std::future<void>> ranks;
  std::latch done(world);  // nobody closes its connections while a peer is still in a collective
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::async(std::launch::async, [=, &done] {
      auto options = Options(10s);
      options.allreduce_algorithm = algorithm;
      auto comm = CreateCommunicator(Env(r, world, port), options);
      try {
        body(*comm);
        comm->Barrier();
      } catch (...) {
        done.count_down();
        throw;
      }
      done.arrive_and_wait();
    }));
  }
  for (auto& f : ranks) f.get();
}

}  // namespace

TEST_CASE("Key-value store: set, get, wait with a deadline", "[trainer][comm]") {
  KvServerOptions options;
  options.token = kToken;
  KvServer server(options);
  KvClient client("127.0.0.1", server.port(), kToken, 2s);
  client.Set("a", std::string("x\0y", 3));
  CHECK(client.TryGet("a") == std::string("x\0y", 3));
  CHECK_FALSE(client.TryGet("b"));
  auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(client.WaitAll({"a", "b"}, 300ms), PeerLostError);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  KvClient nobody("127.0.0.1", testing::FreePort(), kToken, 300ms);
  CHECK_THROWS_WITH(nobody.Set("k", "v"), Catch::Contains("unreachable"));
}

TEST_CASE("Gloo collectives over 3 ranks on loopback", "[trainer][comm]") {
  for (std::string algorithm : {"ring", "halving-doubling"}) {
    OnRanks(3, [](Communicator& comm) {
      const int r = comm.rank();
      std::vector<float> data(1001);
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(r + 1) * static_cast<float>(i);
      comm.AllReduceSum(data);
      for (size_t i = 0; i < data.size(); ++i) REQUIRE(data[i] == 6.0f * static_cast<float>(i));
      comm.AllReduceSum(data);  // cached algorithm, same buffer
      REQUIRE(data[10] == 180.0f);

      std::vector<float> rs(100);
      for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i) + static_cast<float>(r) * 1000.0f;
      comm.ReduceScatterSum(rs);
      SampleRange mine = BlockRange(100, r, 3);
      for (int64_t i = mine.begin; i < mine.end; ++i) REQUIRE(rs[static_cast<size_t>(i)] == 3.0f * static_cast<float>(i) + 3000.0f);
      comm.AllGather(rs);
      for (size_t i = 0; i < rs.size(); ++i) REQUIRE(rs[i] == 3.0f * static_cast<float>(i) + 3000.0f);

      auto words = comm.AllGatherWord(100 + r);
      REQUIRE(words == std::vector<uint64_t>{100, 101, 102});
      std::vector<uint8_t> bytes(5, static_cast<uint8_t>(r));
      comm.Broadcast(bytes, 2);
      REQUIRE(bytes == std::vector<uint8_t>(5, 2));
    }, algorithm);
  }
}

namespace {

/// Integer-valued input of `rank` in [-1000, 1000], so sums over up to 5 ranks are exact in float.
float RsInput(int rank, size_t i, int round) {
  return static_cast<float>(static_cast<int64_t>((i * 37 + static_cast<size_t>(rank) * 101 + static_cast<size_t>(round) * 7) % 2001) - 1000);
}

/// On one rank: for every length, 3 rounds of ReduceScatterSum back to back on one buffer (no other
/// collective between them), then an AllReduceSum of each round's input; returns the first element
/// of this rank's block where they (or the all-reduce and the exact sum) disagree, or "" if none.
/// Every rank makes the same calls whatever it finds, so a mismatch cannot stall its peers.
std::string ReduceScatterMismatch(Communicator& comm, const std::vector<size_t>& lengths) {
  const int r = comm.rank(), world = comm.world_size();
  std::string first;
  constexpr int kRounds = 3;
  for (size_t n : lengths) {
    const SampleRange mine = BlockRange(static_cast<int64_t>(n), r, world);
    std::vector<float> data(n);
    std::vector<std::vector<float>> blocks(kRounds);
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < n; ++i) data[i] = RsInput(r, i, round);
      comm.ReduceScatterSum(data);
      blocks[round].assign(data.begin() + mine.begin, data.begin() + mine.end);
    }
    for (int round = 0; round < kRounds && n > 0; ++round) {
      for (size_t i = 0; i < n; ++i) data[i] = RsInput(r, i, round);
      comm.AllReduceSum(data);
      for (auto i = static_cast<size_t>(mine.begin); i < static_cast<size_t>(mine.end); ++i) {
        float exact = 0, got = blocks[round][i - static_cast<size_t>(mine.begin)];
        for (int q = 0; q < world; ++q) exact += RsInput(q, i, round);
        if ((got == data[i] && data[i] == exact) || !first.empty()) continue;
        std::ostringstream out;
        out << "world " << world << ", length " << n << ", round " << round << ", rank " << r << ", element " << i
            << ": reduce-scatter " << got << ", all-reduce " << data[i] << ", exact " << exact;
        first = out.str();
      }
    }
  }
  return first;
}

}  // namespace

TEST_CASE("ReduceScatterSum leaves on every rank its BlockRange of the all-reduce for 2 to 5 ranks", "[trainer][comm]") {
  // Lengths below the world size (some ranks own nothing), not divisible by it, and about the MLP's
  // 235,146 parameters.
  const std::vector<size_t> lengths{0, 1, 2, 3, 4, 5, 7, 13, 64, 1001, 235146};
  for (int world = 2; world <= 5; ++world) {
    std::vector<std::string> mismatch(static_cast<size_t>(world));
    OnRanks(world, [&](Communicator& comm) { mismatch[static_cast<size_t>(comm.rank())] = ReduceScatterMismatch(comm, lengths); });
    for (const auto& m : mismatch) CHECK(m == "");
  }
}

TEST_CASE("A rank that never arrives, or belongs to another attempt, fails the rendezvous in time", "[trainer][comm]") {
  int port = testing::FreePort();
  auto start = std::chrono::steady_clock::now();
  std::latch serving(1);
  auto stale = std::async(std::launch::async, [=, &serving] {
    // Same job, stale attempt: it has another attempt's token, so the store refuses it at once.
    serving.wait();
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(CreateCommunicator(Env(1, 2, port, "0", "stale-attempt-token-0123456789"), Options(1500ms)),
                      Catch::Contains("wrong rendezvous token"));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  });
  auto rank0 = std::async(std::launch::async, [=] {
    CHECK_THROWS_AS(CreateCommunicator(Env(0, 2, port), Options(1500ms)), PeerLostError);
  });
  // Rank 0's store is up once its port accepts connections.
  KvClient probe("127.0.0.1", port, kToken, 2s);
  probe.TryGet("probe");
  serving.count_down();
  stale.get();
  rank0.get();
  CHECK(std::chrono::steady_clock::now() - start < 8s);
}

TEST_CASE("Rendezvous env is validated", "[trainer][comm]") {
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "2", 1);
  CHECK_THROWS_WITH(ReadRendezvousEnv(), Catch::Contains("RANK"));
  ::setenv("RANK", "1", 1);
  ::unsetenv("MASTER_ADDR");
  CHECK_THROWS_WITH(ReadRendezvousEnv(), Catch::Contains("MASTER_ADDR"));
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::unsetenv("MLSCHED_RENDEZVOUS_TOKEN");
  ::unsetenv("MLTRAIN_INSECURE_RENDEZVOUS");
  CHECK_THROWS_WITH(ReadRendezvousEnv(), Catch::Contains("MLSCHED_RENDEZVOUS_TOKEN must be set"));
  ::setenv("MLSCHED_RENDEZVOUS_TOKEN", "short-secret", 1);
  try {
    ReadRendezvousEnv();
    FAIL("a 12-byte token was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("16 to 256 bytes") != std::string::npos);
    CHECK(std::string(e.what()).find("short-secret") == std::string::npos);  // never echo the secret
  }
  ::setenv("MLSCHED_RENDEZVOUS_TOKEN", kToken.c_str(), 1);
  CHECK(ReadRendezvousEnv().token == kToken);
  CHECK(ReadRendezvousEnv().rendezvous_fd == -1);
  ::setenv("MLSCHED_RENDEZVOUS_FD", "17", 1);
  CHECK(ReadRendezvousEnv().rendezvous_fd == 17);
  ::setenv("MLSCHED_RENDEZVOUS_FD", "1", 1);  // never a standard descriptor
  CHECK_THROWS_WITH(ReadRendezvousEnv(), Catch::Contains("MLSCHED_RENDEZVOUS_FD"));
  ::unsetenv("MLSCHED_RENDEZVOUS_FD");
  ::unsetenv("MLSCHED_RENDEZVOUS_TOKEN");
  ::setenv("MLTRAIN_INSECURE_RENDEZVOUS", "1", 1);
  CHECK(ReadRendezvousEnv().token.empty());
  ::unsetenv("MLTRAIN_INSECURE_RENDEZVOUS");
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("RANK");
  CHECK(ReadRendezvousEnv().world_size == 1);
}
