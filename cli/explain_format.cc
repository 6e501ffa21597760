#include "cli/explain_format.h"

#include <cmath>
#include <cstdio>

#include "cli/job_states.h"
#include "common/safe_text.h"
#include "common/units.h"

namespace mlsched::cli {

namespace {

struct Factor {
  const char* name;
  int64_t weight;
  double value;
};

std::vector<Factor> Factors(const v1::ExplainJobResponse& r) {
  const auto& w = r.weights();
  const auto& f = r.factors();
  return {{"age", w.age(), f.age()},
          {"fairshare", w.fairshare(), f.fairshare()},
          {"job_size", w.job_size(), f.job_size()},
          {"partition", w.partition(), f.partition()},
          {"qos", w.qos(), f.qos()}};
}

std::string Printf(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string OrDefault(const std::string& s, const char* def) { return s.empty() ? def : s; }

// A text from schedd as the block shows it: escaped for the terminal, `def` when empty.
std::string Shown(const std::string& s, const char* def) { return SafeText(OrDefault(s, def)); }

// "CPU 12.3 s, MaxRSS 300 MiB, GPUs 3 % busy over 0.50 GPU-h, 0.12 kWh" (what is known of it).
std::string UsageText(const v1::JobUsage& u) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (u.cpu_usec() >= 0) add(Printf("CPU %.1f s", static_cast<double>(u.cpu_usec()) / 1e6));
  if (u.max_rss_bytes() >= 0) add(Printf("MaxRSS %.0f MiB", static_cast<double>(u.max_rss_bytes()) / (1 << 20)));
  if (u.gpu_seconds() > 0)
    add(Printf("GPUs %.0f %% busy over %.2f GPU-h", 100.0 * u.gpu_busy_seconds() / u.gpu_seconds(), u.gpu_seconds() / 3600));
  if (u.gpu_energy_joules() > 0) add(Printf("%.3f kWh", u.gpu_energy_joules() / 3.6e6));
  if (u.oom_kills() > 0) add(Printf("%lld OOM kill(s)", static_cast<long long>(u.oom_kills())));
  return out.empty() ? "nothing measured yet" : out + Printf(" (%d rank%s)", u.ranks(), u.ranks() == 1 ? "" : "s");
}

}  // namespace

std::string FormatExplain(const v1::ExplainJobResponse& r) {
  const v1::JobInfo& j = r.job();
  const v1::JobSpec& s = j.spec();
  const bool pending = j.state() == v1::PENDING;
  std::string out = "Job " + std::to_string(j.job_id()) + " (" + Shown(s.name(), "-") + ") user " + SafeText(j.user()) +
                    ", account " + Shown(s.account(), "-") + ", partition " + Shown(s.partition(), "-") +
                    ", QoS " + Shown(s.qos(), "-") + ": " + StateName(j.state()) + "\n";
  // Values are ours or already escaped; appended whole (a long reason detail is never cut).
  auto line = [&](const char* key, const std::string& value) { out += Printf("  %-15s ", key) + value + "\n"; };
  if (pending) {
    std::string reason = Shown(j.reason(), "None");
    if (!j.reason_detail().empty()) reason += " (" + SafeText(j.reason_detail()) + ")";
    line("Reason:", reason);
    line("Expected start:", j.expected_start() > 0 ? FormatTimestamp(j.expected_start()) : "N/A (unknown)");
    if (!r.start_basis().empty()) line("Start rests on:", SafeText(r.start_basis()));
  } else if (!j.reason().empty() && j.reason() != "None") {
    line("Reason:", SafeText(j.reason()));
  }
  if (!j.resize().empty()) line("Resized:", SafeText(j.resize()));
  if (!j.stall().empty()) line("Watchdog:", SafeText(j.stall()));
  if (j.idle_gpus_since() > 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "IDLE: its GPUs %.1f %% busy since %s (the policy's [idle])", j.idle_gpu_util(),
                  FormatTimestamp(j.idle_gpus_since()).c_str());
    line("Idle GPUs:", buf);
  }
  if (j.has_usage() && j.usage().ranks() > 0) line("Usage:", UsageText(j.usage()));
  std::string order = Shown(r.queue_order(), "fifo");
  if (order == "fifo") order += " (the queue is ordered by submit time; priority is informational)";
  line("Queue order:", order);
  if (!pending) {
    line("Priority:", Printf("%.0f (no factors: the job is not pending)", j.priority()));
    return out;
  }
  if (!r.pending() && s.hold()) {  // held jobs take no part in the cycle
    line("Priority:", "0 (no factors: the job is held; `mladmin release " + std::to_string(j.job_id()) +
                          "` puts it back in the queue)");
    return out;
  }
  if (!r.pending()) {  // pending but not in the queue right now (a launch backoff, or tasks exiting)
    line("Priority:", Printf("%.0f (no factors now: the job waits out a launch backoff, or for its last "
                             "attempt's tasks to exit)",
                             j.priority()));
    return out;
  }
  const auto& f = r.factors();
  line("Priority:", std::to_string(f.priority()) + Printf(" (last cycle: %.0f)", j.priority()));
  line("Fairshare:", Printf("%.4f", f.fairshare()));
  out += Printf("  %-10s %10s %8s %10s\n", "FACTOR", "WEIGHT", "VALUE", "WEIGHTED");
  for (const Factor& x : Factors(r))
    out += Printf("  %-10s %10lld %8.4f %10.1f\n", x.name, static_cast<long long>(x.weight), x.value,
                  static_cast<double>(x.weight) * x.value);
  out += Printf("  %-10s %10s %8s %10lld\n", "nice", "", "", static_cast<long long>(-f.nice()));
  out += Printf("  %-10s %10s %8s %10lld\n", "PRIORITY", "", "", static_cast<long long>(f.priority()));
  return out;
}

nlohmann::json ExplainJson(const v1::ExplainJobResponse& r) {
  const v1::JobInfo& j = r.job();
  const v1::JobSpec& s = j.spec();
  const bool pending = r.pending() && j.state() == v1::PENDING;
  const auto& w = r.weights();
  nlohmann::json factors = nullptr, weighted = nullptr;
  if (pending) {
    factors = nlohmann::json::object();
    weighted = nlohmann::json::object();
    for (const Factor& x : Factors(r)) {
      factors[x.name] = x.value;
      weighted[x.name] = static_cast<double>(x.weight) * x.value;
    }
  }
  return {
      {"job_id", j.job_id()},
      {"name", s.name()},
      {"user", j.user()},
      {"account", s.account()},
      {"partition", s.partition()},
      {"qos", s.qos()},
      {"state", StateName(j.state())},
      {"reason", j.reason()},
      {"reason_detail", j.reason_detail()},
      {"resize", j.resize()},
      {"expected_start", j.expected_start()},
      {"start_basis", r.start_basis()},
      {"queue_order", OrDefault(r.queue_order(), "fifo")},
      {"priority", pending ? r.factors().priority() : static_cast<int64_t>(std::llround(j.priority()))},
      {"fairshare_factor", pending ? nlohmann::json(r.factors().fairshare()) : nlohmann::json(nullptr)},
      {"factors", factors},
      {"weights",
       {{"age", w.age()}, {"fairshare", w.fairshare()}, {"job_size", w.job_size()}, {"partition", w.partition()},
        {"qos", w.qos()}, {"max_age", w.max_age_s()}, {"favor_small", w.favor_small()}}},
      {"weighted", weighted},
      {"nice", pending ? r.factors().nice() : static_cast<int64_t>(s.nice())},
      {"computed_at", r.now()},
  };
}

}  // namespace mlsched::cli
