// Accounting (issue 34): AttemptUsage sums what an attempt's ranks used from their agents'
// heartbeats and exits; the Controller keeps it per running attempt, shows it in JobInfo.usage and
// stores it with the attempt (the attempts table) when the attempt ends.
#include <catch2/catch.hpp>

#include "schedd/server/attempt_usage.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

namespace {

v1::RunningTask Sample(int32_t rank, int64_t cpu_usec, int64_t rss, int32_t util, int64_t power_mw) {
  v1::RunningTask t;
  t.set_job_id(7);
  t.set_attempt(1);
  t.set_rank(rank);
  t.set_cpu_usec(cpu_usec);
  t.set_rss_bytes(rss);
  t.set_max_rss_bytes(rss);
  if (util >= 0) t.set_gpu_util_percent(util);
  if (power_mw >= 0) t.set_gpu_power_mw(power_mw);
  return t;
}

}  // namespace

TEST_CASE("AttemptUsage: CPU summed over ranks, MaxRSS of the largest, GPU-seconds integrated between samples",
          "[accounting]") {
  AttemptUsage u;
  CHECK(u.Of(7, 1).ranks() == 0);
  CHECK(u.Of(7, 1).cpu_usec() == -1);
  // Two ranks of 2 GPUs each, sampled every 30 s: rank 0 at 50 % and 300 W, rank 1 idle.
  u.OnRunning(Sample(0, 1'000'000, 100 << 20, 50, 300'000), 2, 1000);
  u.OnRunning(Sample(1, 2'000'000, 200 << 20, 0, 80'000), 2, 1000);
  u.OnRunning(Sample(0, 31'000'000, 300 << 20, 50, 300'000), 2, 1030);
  u.OnRunning(Sample(1, 3'000'000, 150 << 20, 0, 80'000), 2, 1030);
  auto a = u.Of(7, 1);
  CHECK(a.ranks() == 2);
  CHECK(a.cpu_usec() == 34'000'000);
  CHECK(a.max_rss_bytes() == 300 << 20);
  CHECK(a.gpu_seconds() == Approx(120));        // 2 ranks x 2 GPUs x 30 s
  CHECK(a.gpu_busy_seconds() == Approx(30));    // rank 0's 60 GPU-s at 50 %
  CHECK(a.gpu_energy_joules() == Approx(300 * 30 + 80 * 30));
  // A gap longer than kMaxGapS is not integrated (the stream said nothing of it).
  u.OnRunning(Sample(0, 32'000'000, 100 << 20, 100, -1), 2, 1030 + AttemptUsage::kMaxGapS + 1);
  CHECK(u.Of(7, 1).gpu_seconds() == Approx(120));
  // The exit's final figures win; later heartbeats of the rank are stale.
  v1::TaskExited e;
  e.set_job_id(7);
  e.set_attempt(1);
  e.set_rank(1);
  e.set_cpu_usec(4'000'000);
  e.set_max_rss_bytes(250 << 20);
  e.set_oom_kills(1);
  u.OnExited(e);
  u.OnRunning(Sample(1, 9'000'000'000, 900 << 20, 100, 1), 2, 1200);
  a = u.Of(7, 1);
  CHECK(a.cpu_usec() == 32'000'000 + 4'000'000);
  CHECK(a.max_rss_bytes() == 300 << 20);
  CHECK(a.oom_kills() == 1);
  // Hostile figures are clamped, never overflow.
  v1::RunningTask bad = Sample(2, INT64_MAX, INT64_MAX, 1000, INT64_MAX);
  u.OnRunning(bad, 1 << 30, 1000);
  u.OnRunning(bad, 1 << 30, 1030);
  a = u.Of(7, 1);
  CHECK(a.cpu_usec() > 0);
  CHECK(a.max_rss_bytes() <= int64_t{1} << 50);
  CHECK(a.gpu_busy_seconds() <= a.gpu_seconds());
  u.Forget(7, 1);
  CHECK(u.Attempts() == 0);
}

TEST_CASE("the controller shows a running attempt's usage and stores it with the attempt", "[controller][accounting]") {
  NodesWorld w(2, 4);
  int64_t id = w.Submit(Spec(2, 2), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  const v1::JobInfo info = w.Job(id);
  REQUIRE(info.state() == v1::RUNNING);
  auto beat = [&](int64_t at, int64_t cpu_usec, int64_t rss) {
    for (const auto& t : info.tasks()) {
      v1::AgentMessage m = Heartbeat({{id, 1, t.rank()}});
      auto* r = m.mutable_heartbeat()->mutable_running(0);
      r->set_cpu_usec(cpu_usec);
      r->set_rss_bytes(rss);
      r->set_max_rss_bytes(rss);
      w.ctl->OnAgentMessage(t.node(), m, at);
    }
  };
  beat(w.now + 10, 5'000'000, 64 << 20);
  // Another node cannot speak for a rank it does not hold.
  const std::string other = info.tasks(0).node() == "n1" ? "n2" : "n1";
  v1::AgentMessage forged = Heartbeat({{id, 1, info.tasks(0).rank()}});
  forged.mutable_heartbeat()->mutable_running(0)->set_cpu_usec(int64_t{1} << 40);
  w.ctl->OnAgentMessage(other, forged, w.now + 11);
  auto live = w.Job(id).usage();
  CHECK(live.ranks() == 2);
  CHECK(live.cpu_usec() == 10'000'000);
  CHECK(live.max_rss_bytes() == 64 << 20);
  // The exits carry the final figures; the attempt row keeps them.
  for (const auto& t : info.tasks()) {
    v1::AgentMessage m = Exited(id, 1, t.rank(), 0);
    m.mutable_task_exited()->set_cpu_usec(8'000'000);
    m.mutable_task_exited()->set_max_rss_bytes(t.rank() == 0 ? 300 << 20 : 100 << 20);
    w.ctl->OnAgentMessage(t.node(), m, w.now + 20);
  }
  REQUIRE(w.Job(id).state() == v1::COMPLETED);
  CHECK(w.Job(id).usage().cpu_usec() == 16'000'000);
  CHECK(w.Job(id).usage().max_rss_bytes() == 300 << 20);
  auto rows = w.store->LoadAttempts(0, w.now + 100);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].cpu_usec == 16'000'000);
  CHECK(rows[0].max_rss_bytes == 300 << 20);
  CHECK(rows[0].oom_kills == 0);
}

TEST_CASE("what a job used is its owner's and the operators' to see (Slurm's PrivateData=usage)",
          "[controller][accounting][security]") {
  NodesWorld w(1, 4);
  const int64_t id = w.Submit(Spec(1, 1), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  v1::AgentMessage m = Heartbeat({{id, 1, 0}});
  m.mutable_heartbeat()->mutable_running(0)->set_cpu_usec(5'000'000);
  m.mutable_heartbeat()->mutable_running(0)->set_max_rss_bytes(64 << 20);
  w.ctl->OnAgentMessage("n1", m, w.now + 10);
  auto seen_by = [&](const Caller& who) {
    v1::JobInfo info;
    REQUIRE(w.ctl->Get(who, id, &info).ok());
    v1::ListJobsRequest req;
    v1::ListJobsResponse resp;
    REQUIRE(w.ctl->List(who, req, w.now + 11, &resp).ok());
    REQUIRE(resp.jobs_size() == 1);
    CHECK(resp.jobs(0).has_usage() == info.has_usage());
    return info.has_usage() ? info.usage().cpu_usec() : -2;
  };
  CHECK(seen_by(w.alice) == 5'000'000);
  CHECK(seen_by(Root()) == 5'000'000);
  CHECK(seen_by(User("bob", 1002)) == -2);
}

TEST_CASE("AttemptUsage: the GPUs' peak utilization and memory per attempt, and over attempts", "[accounting]") {
  AttemptUsage u;
  v1::RunningTask t = Sample(0, 1, 1, 35, -1);
  t.set_gpu_memory_bytes(int64_t{20} << 30);
  u.OnRunning(t, 2, 1000);
  t.set_gpu_util_percent(90);
  t.set_gpu_memory_bytes(int64_t{12} << 30);
  u.OnRunning(t, 2, 1030);
  v1::RunningTask cpu_only = Sample(1, 1, 1, 100, -1);  // a rank without GPUs says nothing of them
  cpu_only.set_gpu_memory_bytes(int64_t{1} << 40);
  u.OnRunning(cpu_only, 0, 1030);
  v1::JobUsage a = u.Of(7, 1);
  CHECK(a.gpu_util_max_percent() == 90);
  CHECK(a.gpu_memory_max_bytes() == int64_t{20} << 30);
  v1::JobUsage later;
  later.set_gpu_util_max_percent(40);
  later.set_gpu_memory_max_bytes(int64_t{30} << 30);
  const v1::JobUsage both = AddUsage(&a, later);
  CHECK(both.gpu_util_max_percent() == 90);
  CHECK(both.gpu_memory_max_bytes() == int64_t{30} << 30);
}

TEST_CASE("AttemptCost: core-hours and GPU-hours of an ended attempt at its pool's [pricing] (mlreport's Cost)", "[accounting]") {
  std::map<std::string, core::PoolPricing> pricing;
  pricing["on-demand"].cpu_hour = 0.05;
  pricing["on-demand"].gpu_hour["h100"] = 4.0;
  pricing["spot"].gpu_hour[""] = 1.5;  // any type
  AttemptRow a;
  a.start_time = 1000;
  a.end_time = 1000 + 7200;  // 2 h
  a.cpu_millis = 16000;      // 16 cores
  a.gpus = 8;
  a.gpu_type = "h100";
  a.pool = "on-demand";
  CHECK(AttemptCost(a, pricing) == Approx(2 * (16 * 0.05 + 8 * 4.0)));
  a.pool = "spot";
  CHECK(AttemptCost(a, pricing) == Approx(2 * 8 * 1.5));
  a.pool = "reserved";  // no price: free
  CHECK(AttemptCost(a, pricing) == 0);
  a.pool = "on-demand";
  a.end_time = 0;  // not ended
  CHECK(AttemptCost(a, pricing) == 0);
}

TEST_CASE("a job's usage totals its attempts' cost and the work its requeues lost", "[controller][accounting]") {
  NodesWorld w(1, 4);
  w.ctl->SetPolicy(PolicyFromText("[pricing.on-demand]\ncpu_hour = 0.5\n", "p.toml"));
  const int64_t id = w.Submit(Spec(1, 2), w.alice);
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  // A checkpoint at +600, then the node's task is lost at +1800: 1,200 s of work lost, requeued.
  v1::AgentMessage beat = Heartbeat({{id, 1, 0}});
  beat.mutable_heartbeat()->mutable_running(0)->set_last_checkpoint_time(w.now + 600);
  w.ctl->OnAgentMessage("n1", beat, w.now + 600);
  w.ctl->OnAgentMessage("n1", Heartbeat({}), w.now + 1200);  // the task is gone from its node's reports
  w.ctl->OnAgentMessage("n1", Heartbeat({}), w.now + 1800);
  const v1::JobInfo info = w.Job(id);
  REQUIRE(info.state() == v1::PENDING);
  REQUIRE(info.has_usage());
  CHECK(info.usage().lost_work_seconds() == 1200);
  CHECK(info.usage().cost() == Approx(2 * 0.5 * 0.5));  // 2 cores x 0.5 h x 0.5
}
