// The idle-GPU policy ([idle]; idle_gpus.h, controller_idle.cc): a running job whose GPUs stay
// below gpu_util_below for `after` is notified (event, metric, mlq's flag, a line in its stderr),
// requeued or cancelled, by the rule of its QoS, its partition or [idle]; exempt jobs are left
// alone. [fairshare] charge = "busy" charges GPUs at their measured utilization.
#include <catch2/catch.hpp>

#include "schedd/core/fairshare.h"
#include "schedd/policy/policy_loader.h"
#include "schedd/server/idle_gpus.h"
#include "schedd/server/metrics.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using namespace mlsched::server::testing;
namespace core = mlsched::core;

TEST_CASE("IdleGpus: a GPU-weighted mean below the threshold from the first such sample, busy again clears it", "[idle]") {
  IdleGpus g;
  // Rank 0 holds 1 GPU at 100 %, rank 1 holds 3 at 0 %: 25 % busy, not below 5.
  g.OnSample(7, 1, 0, 1, 100, 5, 1000);
  g.OnSample(7, 1, 1, 3, 0, 5, 1000);
  CHECK(*g.MeanUtil(7, 1, 1000) == Approx(25));
  CHECK(g.IdleNow(1000).empty());
  // Rank 0 drops to 4 %: a mean of 1 % from 1030 on.
  g.OnSample(7, 1, 0, 1, 4, 5, 1030);
  auto idle = g.IdleOf(7, 1, 1030);
  REQUIRE(idle);
  CHECK(idle->since == 1030);
  CHECK(idle->util == Approx(1));
  CHECK(idle->gpus == 4);
  g.OnSample(7, 1, 1, 3, 2, 5, 1060);
  CHECK(g.IdleOf(7, 1, 1060)->since == 1030);
  g.Flag(7, 1);
  CHECK(g.Flagged(7, 1));
  CHECK(g.IdleNow(1060).front().flagged);
  // A silent attempt is not idle (no fresh sample says so); nor is a rank without GPUs counted.
  CHECK_FALSE(g.IdleOf(7, 1, 1060 + IdleGpus::kMaxGapS + 1));
  g.OnSample(7, 1, 2, 0, 100, 5, 1061);
  CHECK(*g.MeanUtil(7, 1, 1061) < 5);
  // Busy again: the idle period and its flag end.
  g.OnSample(7, 1, 1, 3, 90, 5, 1090);
  CHECK_FALSE(g.IdleOf(7, 1, 1090));
  CHECK_FALSE(g.Flagged(7, 1));
  // A threshold of 0 (exempt, or the policy off) never makes it idle; hostile values are clamped.
  g.OnSample(8, 1, 0, 1, -50, 0, 1000);
  CHECK_FALSE(g.IdleOf(8, 1, 1000));
  CHECK(*g.RankUtil(8, 1, 0, 1000) == 0);
  g.OnSample(8, 1, 1, 1 << 30, 1000, 5, 1000);
  CHECK(*g.RankUtil(8, 1, 1, 1000) == 100);
  g.Forget(7, 1);
  g.Forget(8, 1);
  CHECK(g.Attempts() == 0);
}

TEST_CASE("IdleGpus::TakeDue: an idle period past its rule's `after` is due once, with its words, ineligible ones wait",
          "[idle]") {
  IdleGpus g;
  g.OnSample(7, 1, 0, 4, 2, 5, 1000);
  g.OnSample(8, 1, 0, 2, 0, 5, 1000);
  core::IdleRule rule;
  rule.after = 600;
  rule.action = core::IdleRule::Action::kRequeue;
  bool eligible8 = false;
  auto rule_of = [&](int64_t job, int32_t) -> std::optional<core::IdleRule> {
    if (job == 8 && !eligible8) return std::nullopt;
    return rule;
  };
  g.OnSample(7, 1, 0, 4, 2, 5, 1599);
  g.OnSample(8, 1, 0, 2, 0, 5, 1599);
  CHECK(g.TakeDue(1599, rule_of).empty());  // 599 s: not yet
  g.OnSample(7, 1, 0, 4, 2, 5, 1600);
  g.OnSample(8, 1, 0, 2, 0, 5, 1600);
  auto due = g.TakeDue(1600, rule_of);
  REQUIRE(due.size() == 1);
  CHECK(due[0].idle.job == 7);
  CHECK(due[0].rule.action == core::IdleRule::Action::kRequeue);
  CHECK(due[0].what == "4 GPU(s) 2.0 % busy (below 5.0 %) for 10m; policy [idle] action requeue");
  CHECK(g.Flagged(7, 1));
  CHECK(g.TakeDue(1601, rule_of).empty());  // once per idle period; job 8 still not judged
  eligible8 = true;
  due = g.TakeDue(1601, rule_of);
  REQUIRE(due.size() == 1);
  CHECK(due[0].idle.job == 8);
  CHECK(due[0].what == "2 GPU(s) 0.0 % busy (below 5.0 %) for 601s; policy [idle] action requeue");
}

TEST_CASE("[idle] is read with its overrides, the rule of a job is its QoS's, else its partition's, exemptions", "[policy][idle]") {
  const std::string text =
      "[[partitions]]\nname = \"default\"\n[[partitions]]\nname = \"batch\"\n"
      "[[qos]]\nname = \"normal\"\n[[qos]]\nname = \"scavenger\"\n[[qos]]\nname = \"debug\"\n"
      "[idle]\ngpu_util_below = 5\nafter = \"30m\"\naction = \"notify\"\nexempt_users = [\"carol\"]\n"
      "exempt_accounts = [\"viz\"]\nexempt_qos = [\"debug\"]\nrequeue_grace = \"2m\"\n"
      "[idle.partitions.batch]\naction = \"cancel\"\nafter = \"1h\"\n"
      "[idle.qos.scavenger]\naction = \"requeue\"\ngpu_util_below = 10\n";
  auto r = mlsched::policy::ParsePolicy(text, "p.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const core::PolicySet& p = *r.policy;
  CHECK(p.idle.requeue_grace == 120);
  CHECK(p.idle.source.Of("after") == "p.toml:13");
  auto rule = [&](const std::string& user, const std::string& account, const std::string& partition, const std::string& qos) {
    core::JobSpec s;
    s.user = user;
    s.account = account;
    s.partition = partition;
    s.qos = qos;
    return core::IdleRuleFor(p, s);
  };
  auto base = rule("alice", "ml", "", "");
  REQUIRE(base);
  CHECK(base->action == core::IdleRule::Action::kNotify);
  CHECK(base->after == 1800);
  auto batch = rule("alice", "ml", "batch", "normal");
  REQUIRE(batch);
  CHECK(batch->action == core::IdleRule::Action::kCancel);
  CHECK(batch->after == 3600);
  CHECK(batch->gpu_util_below == 5);  // [idle]'s, not overridden
  auto scav = rule("alice", "ml", "batch", "scavenger");  // the QoS wins over the partition
  REQUIRE(scav);
  CHECK(scav->action == core::IdleRule::Action::kRequeue);
  CHECK(scav->gpu_util_below == 10);
  CHECK(scav->after == 1800);
  CHECK_FALSE(rule("carol", "ml", "", ""));
  CHECK_FALSE(rule("alice", "viz", "", ""));
  CHECK_FALSE(rule("alice", "ml", "", "debug"));
  // On by default, notifying after 30 min below 5 %; gpu_util_below = 0 turns it off.
  auto d = mlsched::policy::ParsePolicy("", "d.toml");
  REQUIRE(d.ok());
  CHECK(d.policy->idle.rule.gpu_util_below == 5);
  CHECK(d.policy->idle.rule.action == core::IdleRule::Action::kNotify);
  CHECK(d.policy->fairshare.charge == core::FairsharePolicy::Charge::kAllocated);
  CHECK_FALSE(core::IdleRuleFor(*mlsched::policy::ParsePolicy("[idle]\ngpu_util_below = 0\n", "o.toml").policy, core::JobSpec{}));
  CHECK(mlsched::policy::ParsePolicy("[fairshare]\ncharge = \"busy\"\n", "f.toml").policy->fairshare.charge ==
        core::FairsharePolicy::Charge::kBusy);
  for (const auto& [toml, error] : std::vector<std::pair<std::string, std::string>>{
           {"[idle]\naction = \"kill\"\n", "e.toml:2:10: 'action' in [idle]: \"kill\" is not one of \"notify\", \"requeue\", \"cancel\""},
           {"[idle]\ngpu_util_below = 150\n", "e.toml:2:18: 'gpu_util_below' in [idle]: a percentage, 0..100"},
           {"[idle]\nafter = \"5s\"\n", "e.toml:2:9: 'after' in [idle]: at least 10s"},
           {"[idle]\nidle_after = \"1h\"\n", "e.toml:2:1: unknown key 'idle_after' in [idle]"},
           {"[idle.partitions.gpu]\naction = \"cancel\"\n", "e.toml:1:1: [idle.partitions.gpu]: 'gpu' is not a defined partition"},
           {"[idle.qos.low]\naction = \"cancel\"\n", "e.toml:1:1: [idle.qos.low]: 'low' is not a defined QoS"},
           {"[idle.qos.low]\nactoin = \"cancel\"\n", "e.toml:2:1: unknown key 'actoin' in [idle.qos.low]"},
           {"[idle]\nexempt_qos = [\"vip\"]\n", "e.toml:2:14: [idle] exempt_qos names 'vip', which is not a defined QoS"},
           {"[idle]\nrequeue_grace = \"2h\"\n", "e.toml:2:17: 'requeue_grace' in [idle]: at most 1h"},
           {"[fairshare]\ncharge = \"used\"\n", "e.toml:2:10: 'charge' in [fairshare]: expected \"allocated\" or \"busy\", got \"used\""},
       }) {
    auto bad = mlsched::policy::ParsePolicy(toml, "e.toml");
    INFO(toml);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.ErrorText().find(error) != std::string::npos);
  }
}

TEST_CASE("[fairshare] charge = \"busy\": a job's GPUs are charged at their measured utilization", "[fairshare][idle]") {
  core::FairsharePolicy f;
  f.billing_weights = {{"cpu", 1}, {"gpu", 10}};
  core::Job j;
  j.state = core::JobState::kRunning;
  j.spec.ntasks = 2;
  j.spec.per_task.cpu_millis = 4000;
  j.spec.per_task.gpus[""] = 2;
  CHECK(core::RunningBillingRate(j, f) == Approx(2 * (4 + 20)));
  j.gpu_busy_fraction = 0.25;
  CHECK(core::RunningBillingRate(j, f) == Approx(2 * (4 + 20)));  // charge = allocated: as held
  f.charge = core::FairsharePolicy::Charge::kBusy;
  CHECK(core::RunningBillingRate(j, f) == Approx(2 * 4 + 2 * 20 * 0.25));
  j.gpu_busy_fraction = -1;  // not measured: as held
  CHECK(core::RunningBillingRate(j, f) == Approx(2 * (4 + 20)));
}

namespace {

struct IdleWorld : NodesWorld {
  SchedMetrics metrics;
  IdleWorld() : NodesWorld(0, 4) {
    for (const char* n : {"g1", "g2", "g3", "g4"}) ctl->OnRegister(NodeReg(n, 8, 2), now);
    ctl->SetMetrics(&metrics);
    ctl->SetPolicy(PolicyFromText(
        "[[partitions]]\nname = \"default\"\n[[partitions]]\nname = \"batch\"\n"
        "[[qos]]\nname = \"normal\"\n[[qos]]\nname = \"scavenger\"\n"
        "[idle]\ngpu_util_below = 5\nafter = \"10m\"\nexempt_users = [\"bob\"]\nrequeue_grace = \"30s\"\n"
        "[idle.partitions.batch]\naction = \"cancel\"\n"
        "[idle.qos.scavenger]\naction = \"requeue\"\nafter = \"5m\"\n",
        "idle.toml"));
  }
  int64_t GpuJob(const Caller& who, const std::string& partition, const std::string& qos) {
    v1::JobSpec s = Spec(1, 1, 2);
    s.set_partition(partition);
    s.set_qos(qos);
    return Submit(s, who);
  }
  std::string NodeOf(int64_t id) { return Job(id).tasks(0).node(); }
  // Every running job's rank 0 reports `util` (percent) for its GPUs at `at`.
  void Beat(const std::map<int64_t, int32_t>& util, int64_t at) {
    for (const auto& [id, u] : util) {
      const v1::JobInfo info = Job(id);
      if (info.state() != v1::RUNNING) continue;
      v1::AgentMessage m = Heartbeat({{id, info.attempt(), 0}});
      m.mutable_heartbeat()->mutable_running(0)->set_gpu_util_percent(u);
      ctl->OnAgentMessage(info.tasks(0).node(), m, at);
    }
  }
};

}  // namespace

TEST_CASE("the idle-GPU policy notifies, requeues or cancels an idle job by its rule and leaves busy and exempt ones",
          "[controller][idle]") {
  IdleWorld w;
  Caller bob = User("bob", 1002);
  const int64_t notify = w.GpuJob(w.alice, "default", "normal");
  const int64_t requeue = w.GpuJob(w.alice, "default", "scavenger");
  const int64_t cancel = w.GpuJob(w.alice, "batch", "normal");
  const int64_t exempt = w.GpuJob(bob, "default", "normal");
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  for (int64_t id : {notify, requeue, cancel, exempt}) REQUIRE(w.Job(id).state() == v1::RUNNING);
  const int64_t t0 = w.now + 10;
  // Every job idle (0-3 %) from t0, sampled each minute; `notify` busy (60 %) for its first 2 min.
  for (int64_t m = 0; m <= 12; ++m) {
    const int64_t at = t0 + m * 60;
    w.Beat({{notify, m < 2 ? 60 : 3}, {requeue, 0}, {cancel, 1}, {exempt, 0}}, at);
    w.ctl->Tick(at);
  }
  // The scavenger job: requeued after 5 min (SIGTERM, the grace, its checkpoint's exit 75).
  auto sig = w.sink.Of(w.NodeOf(requeue), v1::SchedulerMessage::kSignal);
  REQUIRE(sig.size() == 1);
  CHECK(sig[0].signal().reason() == "idle-gpus");
  CHECK(sig[0].signal().grace_s() == 30);
  CHECK(HasEvent(EventsOf(w.dir, requeue), "IDLE|2 GPU(s) 0.0 % busy (below 5.0 %) for 5m; policy [idle] action requeue"));
  w.ctl->OnAgentMessage(w.NodeOf(requeue), Exited(requeue, 1, 0, 75), t0 + 12 * 60 + 1);
  CHECK(w.Job(requeue).state() == v1::PENDING);
  CHECK(w.Job(requeue).reason() == "IdleGPUs");
  // The batch job: cancelled after 10 min.
  CHECK(w.Job(cancel).state() == v1::CANCELLED);
  CHECK(w.Job(cancel).reason() == "IdleGPUs");
  // The default rule notifies after 10 min below 5 %, counted from its first idle sample (t0 + 2 min).
  const std::string node = w.NodeOf(notify);
  auto notices = w.sink.Of(node, v1::SchedulerMessage::kNotice);
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].notice().job_id() == notify);
  CHECK(notices[0].notice().text() == "WARNING: job " + std::to_string(notify) +
                                          " holds 2 GPU(s) 3.0 % busy (below 5.0 %) for 10m; policy [idle] action notify");
  v1::JobInfo info = w.Job(notify);
  CHECK(info.state() == v1::RUNNING);
  CHECK(info.idle_gpus_since() == t0 + 120);
  CHECK(info.idle_gpu_util() == Approx(3));
  CHECK(HasEvent(EventsOf(w.dir, notify), "IDLE|2 GPU(s) 3.0 % busy (below 5.0 %) for 10m; policy [idle] action notify"));
  // Bob is exempt: no notice, no flag, still running.
  CHECK(w.sink.Of(w.NodeOf(exempt), v1::SchedulerMessage::kNotice).empty());
  CHECK(w.Job(exempt).idle_gpus_since() == 0);
  // The metrics: one job flagged, its 2 GPUs; each action counted once; busy GPUs 2 x 3 % + 0.
  const std::string text = w.metrics.Render(w.ctl->CollectGauges());
  CHECK(text.find("mlsched_idle_gpu_jobs 1\n") != std::string::npos);
  CHECK(text.find("mlsched_idle_gpus 2\n") != std::string::npos);
  CHECK(text.find("mlsched_idle_gpu_actions_total{action=\"notify\"} 1\n") != std::string::npos);
  CHECK(text.find("mlsched_idle_gpu_actions_total{action=\"requeue\"} 1\n") != std::string::npos);
  CHECK(text.find("mlsched_idle_gpu_actions_total{action=\"cancel\"} 1\n") != std::string::npos);
  const size_t busy_at = text.find("mlsched_busy_gpus{pool=\"on-demand\"} ");
  REQUIRE(busy_at != std::string::npos);
  CHECK(std::stod(text.substr(busy_at + 36)) == Approx(0.06));
  // Notified once per idle period: more idle minutes send nothing more; busy again clears the flag.
  w.Beat({{notify, 2}}, t0 + 13 * 60);
  w.ctl->Tick(t0 + 13 * 60);
  CHECK(w.sink.Of(node, v1::SchedulerMessage::kNotice).size() == 1);
  w.Beat({{notify, 80}}, t0 + 14 * 60);
  CHECK(w.Job(notify).idle_gpus_since() == 0);
}

TEST_CASE("[fairshare] charge = \"busy\": a team whose GPUs idle is charged less than one whose GPUs compute",
          "[controller][fairshare][idle]") {
  IdleWorld w;
  w.ctl->SetPolicy(PolicyFromText("[fairshare]\ncharge = \"busy\"\nhalf_life = 0\nbilling_weights = { gpu = 1 }\n", "f.toml"));
  Caller bob = User("bob", 1002);
  const int64_t busy = w.GpuJob(w.alice, "", "");
  const int64_t idle = w.GpuJob(bob, "", "");
  w.ctl->RunCycle(w.now);
  w.PrepareAndStartAll();
  for (int64_t m = 0; m <= 10; ++m) {
    w.Beat({{busy, 100}, {idle, 0}}, w.now + m * 60);
    w.ctl->RunCycle(w.now + m * 60);
  }
  const auto usage = w.ctl->Usage();
  double alice = 0, bobs = 0;
  for (const auto& [key, v] : usage) (key.find("alice") != std::string::npos ? alice : bobs) += v;
  CHECK(alice == Approx(2 * 600).epsilon(0.02));  // 2 GPUs x 600 s at 100 %
  CHECK(bobs == Approx(0).margin(1));
}
