// Reproducer of the upstream Gloo bug that GlooCommunicator::ReduceScatterSum works around (see
// trainer/README.md). Not a test: it shows the bug of Debian's libgloo-dev (0.0~git20220518.5b14351)
// and exits 1 while the bug is there, 0 once it is fixed.
//
// gloo::ReduceScatterHalvingDoubling with a world that is not a power of two splits the ranks into
// binary blocks (3 = 2 + 1). A rank of a smaller block sends its whole input to the larger block
// with no handshake: it never learns that the receiver has consumed it, and returns from run() once
// its own result has arrived (at once when its result is empty). Its next run() then sends new data
// into the receiver's bound buffer, which Gloo overwrites on arrival, so the receiver may reduce a
// later call's input. (The reduced block is written to the front of the buffer, not at its offset:
// that is the documented layout, and this program reads it there.)
//
// Usage: gloo_reduce_scatter_repro    (ranks are threads of this process on 127.0.0.1)
#include <gloo/barrier_all_to_all.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

constexpr int kCalls = 3;  // run() calls back to back on one algorithm instance

/// Rank r's input of call c: small integers, so every sum is exact in float.
float Input(int rank, int i, int call) { return static_cast<float>(i % 100 + 1000 * (rank + 1) + call); }

/// Elements per rank as mlsched's BlockRange splits them (the first count % world get one more).
std::vector<int> Blocks(int count, int world) {
  std::vector<int> n(static_cast<size_t>(world), count / world);
  for (int r = 0; r < count % world; ++r) ++n[static_cast<size_t>(r)];
  return n;
}

/// One rank: kCalls run()s; ranks other than the last first sleep `late`. Returns the wrong elements.
int Rank(gloo::rendezvous::Store& store, std::barrier<>& done, int rank, int world, int count, std::chrono::milliseconds late) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(std::chrono::seconds(20));
  context->connectFullMesh(store, device);
  const std::vector<int> blocks = Blocks(count, world);
  int begin = 0;
  for (int r = 0; r < rank; ++r) begin += blocks[static_cast<size_t>(r)];
  std::vector<float> data(static_cast<size_t>(count));
  gloo::ReduceScatterHalvingDoubling<float> algo(context, {data.data()}, count, blocks);
  if (rank != world - 1) std::this_thread::sleep_for(late);
  int wrong = 0;
  for (int call = 0; call < kCalls; ++call) {
    for (int i = 0; i < count; ++i) data[static_cast<size_t>(i)] = Input(rank, i, call);
    algo.run();
    for (int i = 0; i < blocks[static_cast<size_t>(rank)]; ++i) {
      float want = 0;
      for (int q = 0; q < world; ++q) want += Input(q, begin + i, call);
      const float got = data[static_cast<size_t>(i)];  // the result is at the front of the buffer
      if (got != want && wrong++ == 0)
        std::printf("  world %d, %d elements, call %d, rank %d, element %d: got %.0f, want %.0f (%+.0f)\n", world, count,
                    call, rank, begin + i, got, want, got - want);
    }
  }
  gloo::BarrierAllToAll(context).run();
  done.arrive_and_wait();  // nobody closes its connections while a peer still reads
  return wrong;
}

int Case(int world, int count, std::chrono::milliseconds late) {
  gloo::rendezvous::HashStore store;
  std::barrier<> done(world);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { wrong += Rank(store, done, r, world, count, late); });
  for (auto& t : threads) t.join();
  return wrong;
}

}  // namespace

int main() {
  int wrong = 0;
  std::printf("Inputs grow by 1 per call, so a difference of +k is one rank's input of k calls later.\n");
  std::printf("1. deterministic: the last rank (alone in its binary block, owning nothing) runs %d calls while\n"
              "   the others sleep 300 ms; rank 0 then reduces that rank's last input in its calls:\n", kCalls);
  wrong += Case(3, 1, std::chrono::milliseconds(300));
  std::printf("2. timing-dependent: %d calls back to back, no delay:\n", kCalls);
  for (int world = 2; world <= 5; ++world) {
    for (int count : {2, 3, 7, 1001, 4099, 65536}) {
      const int w = Case(world, count, std::chrono::milliseconds(0));
      if (w > 0) std::printf("  -> world %d, %d elements: %d wrong elements\n", world, count, w);
      wrong += w;
    }
  }
  std::printf(wrong > 0 ? "Gloo's ReduceScatterHalvingDoubling gave %d wrong elements\n" : "no wrong element (%d)\n", wrong);
  return wrong > 0 ? 1 : 0;
}
