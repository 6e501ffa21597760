// The shared-memory collectives for same-host ranks: sums equal to the exact ones and identical on
// every rank for 2-5 ranks and awkward lengths, back-to-back calls, reduce-scatter and all-gather
// equal to the all-reduce bit for bit, segments planted by others
// refused, and a dead or missing peer reported instead of waited for forever.
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <random>
#include <thread>
#include <vector>

#include "trainer/log.h"
#include "trainer/sampler.h"
#include "trainer/shm_allreduce.h"

using namespace mltrain;
using namespace std::chrono_literals;

namespace {

std::string UniqueName() {
  std::random_device rd;
  return "/mltrain-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

}  // namespace

TEST_CASE("shared-memory all-reduce gives every rank the exact sum for 2 to 5 ranks", "[trainer][comm][shm]") {
  for (int world : {2, 3, 4, 5}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{7}, size_t{1000}, size_t{235151}}) {
      const std::string name = UniqueName();
      std::vector<std::unique_ptr<ShmAllReducer>> ranks(static_cast<size_t>(world));
      ranks[0] = ShmAllReducer::Create(name, world, count);
      for (int r = 1; r < world; ++r) ranks[static_cast<size_t>(r)] = ShmAllReducer::Open(name, r, world, count);
      ShmAllReducer::Unlink(name);
      std::vector<std::vector<float>> data(static_cast<size_t>(world));
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          for (int call = 0; call < 3; ++call) {  // back to back on one segment
            auto& d = data[static_cast<size_t>(r)];
            d.resize(count);
            for (size_t i = 0; i < count; ++i) d[i] = static_cast<float>((i % 97) * (r + 1) + call);
            ranks[static_cast<size_t>(r)]->AllReduceSum(d, 10s);
          }
        });
      }
      for (auto& t : threads) t.join();
      INFO("world " << world << " count " << count);
      const float rank_sum = static_cast<float>(world * (world + 1) / 2);
      bool exact = true;
      for (size_t i = 0; i < count; ++i) exact = exact && data[0][i] == static_cast<float>(i % 97) * rank_sum + 2.0f * world;
      CHECK(exact);
      for (int r = 1; r < world; ++r) CHECK(data[static_cast<size_t>(r)] == data[0]);
    }
  }
}

TEST_CASE("shared-memory reduce-scatter and all-gather match the all-reduce bit for bit, back to back", "[trainer][comm][shm]") {
  // Random values (rounding depends on the order of the sum), calls interleaved AR, RS, AR, AG as in
  // a ZeRO-1 step, so both buffer sets are reused while peers may still be a call behind.
  for (int world : {2, 3, 5}) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{5000}, size_t{235151}}) {
      const std::string name = UniqueName();
      std::vector<std::unique_ptr<ShmAllReducer>> ranks(static_cast<size_t>(world));
      const size_t capacity = std::max<size_t>(count, 2);  // the small all-reduce has 2 floats
      ranks[0] = ShmAllReducer::Create(name, world, capacity);
      for (int r = 1; r < world; ++r) ranks[static_cast<size_t>(r)] = ShmAllReducer::Open(name, r, world, capacity);
      ShmAllReducer::Unlink(name);
      std::vector<int> failures(static_cast<size_t>(world), 0);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          ShmAllReducer& comm = *ranks[static_cast<size_t>(r)];
          const SampleRange mine = BlockRange(static_cast<int64_t>(count), r, world);
          for (int step = 0; step < 6; ++step) {
            std::vector<float> grad(count);
            std::mt19937 gen(static_cast<uint32_t>(1000 * step + r));
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            for (auto& g : grad) g = u(gen);
            std::vector<float> all = grad, scattered = grad;
            comm.AllReduceSum(all, 10s);
            comm.ReduceScatterSum(scattered, 10s);
            for (int64_t i = mine.begin; i < mine.end; ++i)
              if (scattered[static_cast<size_t>(i)] != all[static_cast<size_t>(i)]) ++failures[static_cast<size_t>(r)];
            std::vector<float> small{static_cast<float>(r), 1.0f};
            comm.AllReduceSum(small, 10s);
            if (small[0] != static_cast<float>(world * (world - 1) / 2) || small[1] != static_cast<float>(world)) ++failures[static_cast<size_t>(r)];
            // Every rank contributes its block of `all` (already equal on every rank) with a
            // rank-specific twist that the gather must carry to everyone else.
            std::vector<float> params(count, -1.0f);
            for (int64_t i = mine.begin; i < mine.end; ++i) params[static_cast<size_t>(i)] = all[static_cast<size_t>(i)] + static_cast<float>(step);
            comm.AllGather(params, 10s);
            for (size_t i = 0; i < count; ++i)
              if (params[i] != all[i] + static_cast<float>(step)) ++failures[static_cast<size_t>(r)];
          }
        });
      }
      for (auto& t : threads) t.join();
      INFO("world " << world << " count " << count);
      for (int f : failures) CHECK(f == 0);
    }
  }
}

TEST_CASE("a shared segment planted by someone else or of another size is refused", "[trainer][comm][shm][security]") {
  const std::string name = UniqueName();
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, static_cast<off_t>(ShmAllReducer::SegmentBytes(2, 16))) == 0);
  CHECK_THROWS_WITH(ShmAllReducer::Open(name, 1, 2, 16), Catch::Contains("refusing shared memory"));  // mode 0644
  CHECK_THROWS_WITH(ShmAllReducer::Create(name, 2, 16), Catch::Contains("cannot create shared memory"));  // O_EXCL
  REQUIRE(::fchmod(fd, 0600) == 0);
  CHECK_THROWS_WITH(ShmAllReducer::Open(name, 1, 2, 32), Catch::Contains("refusing shared memory"));  // size
  CHECK_THROWS_WITH(ShmAllReducer::Open(name, 1, 2, 16), Catch::Contains("another layout"));  // not initialized
  if (::geteuid() == 0) {
    REQUIRE(::fchown(fd, 65534, 65534) == 0);  // another user's, even with the right mode and size
    CHECK_THROWS_WITH(ShmAllReducer::Open(name, 1, 2, 16), Catch::Contains("refusing shared memory"));
  }
  ::close(fd);
  ShmAllReducer::Unlink(name);
}

TEST_CASE("a peer that exited or never arrives makes the all-reduce fail instead of hang", "[trainer][comm][shm]") {
  const std::string name = UniqueName();
  auto rank0 = ShmAllReducer::Create(name, 2, 8);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto rank1 = ShmAllReducer::Open(name, 1, 2, 8);
    ::_exit(0);  // maps the segment, then dies without arriving
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  ShmAllReducer::Unlink(name);
  std::vector<float> data(8, 1.0f);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(rank0->AllReduceSum(data, 30s), Catch::Contains("exited"));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);

  const std::string other = UniqueName();
  auto lonely = ShmAllReducer::Create(other, 2, 8);  // rank 1 never opens it
  ShmAllReducer::Unlink(other);
  CHECK_THROWS_WITH(lonely->AllReduceSum(data, 300ms), Catch::Contains("did not arrive in time"));
}
