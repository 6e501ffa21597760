#include "schedd/sim/sim_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <toml++/toml.h>

#include "schedd/sim/gpu_readers.h"
#include "schedd/sim/line_reader.h"
#include "schedd/sim/swf_reader.h"

namespace mlsched::sim {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::map<std::string, int64_t> ReadAppRuntimes(const std::string& path) {
  std::map<std::string, int64_t> out;
  if (path.empty()) return out;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(path + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
  for (auto&& [key, value] : root) {
    auto seconds = value.value<int64_t>();
    if (!seconds || *seconds <= 0) {
      throw std::runtime_error(path + ": '" + std::string(key.str()) +
                               "' must be a positive number of seconds");
    }
    out[std::string(key.str())] = *seconds;
  }
  return out;
}

}  // namespace

std::string DetectFormat(const std::string& path) {
  if (EndsWith(path, ".swf") || EndsWith(path, ".swf.gz")) return "swf";
  LineReader reader(path);
  std::string header;
  if (!reader.Next(header)) throw TraceError(path + ": empty file; cannot detect its format");
  if (!header.empty() && header[0] == ';') return "swf";
  if (header.rfind("timestamp,duration,num_gpus", 0) == 0) return "philly";
  if (header.rfind("name,time,application", 0) == 0) return "pollux";
  if (header.rfind("name,cpu_milli,memory_mib,num_gpu", 0) == 0) return "alibaba";
  throw TraceError(path + ":1: unknown trace format (give --format swf|philly|pollux|alibaba)");
}

Trace LoadTrace(const SimConfig& config) {
  ReaderOptions options;
  options.strict = config.strict;
  const std::string format = config.format.empty() ? DetectFormat(config.trace_path) : config.format;
  Trace trace;
  GpuTaskShape shape;
  if (format == "swf") {
    SwfOptions swf;
    swf.processors = config.processors;
    trace = ReadSwf(config.trace_path, options, swf);
  } else if (format == "philly") {
    trace = ReadPhilly(config.trace_path, options, shape);
  } else if (format == "pollux") {
    trace = ReadPollux(config.trace_path, options, ReadAppRuntimes(config.app_runtimes_path), shape);
  } else if (format == "alibaba") {
    trace = ReadAlibaba(config.trace_path, config.node_list, options);
  } else {
    throw TraceError("unknown trace format '" + format + "' (want swf, philly, pollux or alibaba)");
  }
  if (config.max_jobs > 0 && static_cast<int64_t>(trace.jobs.size()) > config.max_jobs) {
    trace.jobs.resize(static_cast<size_t>(config.max_jobs));
  }
  if (config.exact_runtimes) UseExactRuntimes(trace);
  if (config.elastic_min_fraction > 0) MakeElastic(trace, config.elastic_min_fraction);
  return trace;
}

void MakeElastic(Trace& trace, double min_fraction) {
  if (!(min_fraction > 0 && min_fraction <= 1)) {
    throw std::invalid_argument("elastic minimum fraction " + std::to_string(min_fraction) +
                                " is outside (0, 1]");
  }
  for (TraceJob& job : trace.jobs) {
    const int32_t n = job.spec.ntasks;
    const auto low = static_cast<int32_t>(std::ceil(static_cast<double>(n) * min_fraction - 1e-9));
    const int32_t min_tasks = std::max<int32_t>(1, low);
    if (n <= 1 || min_tasks >= n) continue;
    job.spec.elastic.min_tasks = min_tasks;
    job.spec.elastic.step = 1;
  }
}

Fleet BuildFleet(const SimConfig& config, const Trace& trace) {
  if (!config.cluster_path.empty()) return ReadClusterFile(config.cluster_path);
  if (config.nodes > 0) {
    return UniformFleet(config.nodes, config.cpus_per_node, config.memory_gib_per_node,
                        config.gpus_per_node, config.gpu_type, config.domain_size);
  }
  if (!trace.nodes.empty()) return FleetFromNodes(trace.nodes);
  return UniformFleet(16, 32, 256, 4, config.gpu_type, 0);
}

policy::PolicyLoadResult ReadPolicy(const std::string& path) {
  if (path.empty()) {
    policy::PolicyLoadResult defaults;
    defaults.policy = core::PolicySet{};
    return defaults;
  }
  policy::PolicyLoadResult r = policy::LoadPolicyFile(path);
  if (!r.ok()) {
    std::string text = r.ErrorText();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    throw std::runtime_error(text);
  }
  return r;
}

SimConfig WithSimulationSettings(SimConfig config, const policy::SimulationSettings& file,
                                 const core::PredictionPolicy& prediction) {
  config.exact_runtimes = config.exact_runtimes || file.exact_runtimes;
  config.predict_runtimes = config.predict_runtimes || file.predict_runtimes || prediction.enabled;
  // A predictor named on the command line with nothing that predicts would be silently ignored.
  if (!config.predictor.empty() && !config.predict_runtimes && !config.estimate_with_predictions)
    throw std::invalid_argument("--predictor " + config.predictor +
                                " has no effect: add --predict-runtimes or --estimate-with-predictions, or enable "
                                "[prediction] in the policy file");
  if (!config.predict_correction.empty() && !config.predict_runtimes && !config.estimate_with_predictions)
    throw std::invalid_argument("--predict-correction " + config.predict_correction +
                                " has no effect: add --predict-runtimes or --estimate-with-predictions, or enable "
                                "[prediction] in the policy file");
  if (config.predictor.empty()) config.predictor = prediction.predictor;
  if (!config.predict_history_by.empty() && !config.predict_runtimes && !config.estimate_with_predictions)
    throw std::invalid_argument("--predict-history-by " + config.predict_history_by +
                                " has no effect: add --predict-runtimes or --estimate-with-predictions, or enable "
                                "[prediction] in the policy file");
  if (config.predict_correction.empty()) config.predict_correction = core::PredictionCorrectionName(prediction.correction);
  if (config.predict_history_by.empty()) config.predict_history_by = core::HistoryByName(prediction.history_by);
  if (!config.predict_history) config.predict_history = file.predict_history.value_or(prediction.history);
  if (!config.predict_scale) config.predict_scale = file.predict_scale.value_or(1.0);
  if (!config.seed) config.seed = file.seed.value_or(1);
  if (!config.cycle_period_s) config.cycle_period_s = file.cycle_period.value_or(0);
  if (!config.checkpoint_interval_s) config.checkpoint_interval_s = file.checkpoint_interval.value_or(0);
  return config;
}

core::PolicySet ApplyOverrides(core::PolicySet policy, const SimConfig& config, const Trace& trace) {
  if (!config.backfill.empty()) SetBackfillMode(policy, config.backfill);
  if (!config.backfill_order.empty()) SetBackfillOrder(policy, config.backfill_order);
  if (!config.queue_order.empty()) SetQueueOrder(policy, config.queue_order);
  if (!config.victim_order.empty()) SetVictimOrder(policy, config.victim_order);
  if (config.keep_plans) policy.backfill.keep_plans = true;
  core::Duration longest = 0;
  for (const auto& j : trace.jobs) {
    core::Duration limit = j.spec.time_limit;
    // An elastic job at its smallest size runs at most ntasks / min_tasks times longer (a speed-up
    // exponent <= 1), plus a restart cost: its time limit follows (simulator.cc, Start).
    if (core::IsElastic(j.spec)) {
      limit = limit * j.spec.ntasks / j.spec.elastic.min_tasks + 1 + std::max<core::Duration>(0, policy.elastic.restart_cost);
    }
    longest = std::max(longest, limit);
  }
  for (auto& p : policy.partitions) p.max_time_limit = std::max(p.max_time_limit, longest);
  return policy;
}

core::PolicySet LoadPolicy(const SimConfig& config, const Trace& trace,
                           std::map<std::string, double>* shares) {
  core::PolicySet policy = ApplyOverrides(std::move(*ReadPolicy(config.policy_path).policy), config, trace);
  if (shares != nullptr) *shares = AccountShares(policy);
  return policy;
}

std::map<std::string, double> AccountShares(const core::PolicySet& policy) {
  std::map<std::string, double> shares;
  for (const auto& a : policy.accounts) shares[a.name] = static_cast<double>(a.shares);
  return shares;
}

void SetBackfillMode(core::PolicySet& policy, const std::string& mode) {
  auto m = core::ParseBackfillMode(mode);
  if (!m) throw std::invalid_argument("unknown backfill mode '" + mode + "' (want none, easy or conservative)");
  policy.backfill.mode = *m;
}

void SetBackfillOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "queue") {
    policy.backfill.order = core::BackfillOrder::kQueue;
  } else if (order == "shortest-first") {
    policy.backfill.order = core::BackfillOrder::kShortestFirst;
  } else {
    throw std::invalid_argument("unknown backfill order '" + order + "' (want queue or shortest-first)");
  }
}

void SetQueueOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "fifo") {
    policy.queue_order = core::QueueOrder::kFifo;
  } else if (order == "multifactor") {
    policy.queue_order = core::QueueOrder::kMultifactor;
  } else {
    throw std::invalid_argument("unknown queue order '" + order + "' (want fifo or multifactor)");
  }
}

void SetVictimOrder(core::PolicySet& policy, const std::string& order) {
  if (order == "least-lost-work") {
    policy.victim_order = core::VictimOrder::kLeastLostWork;
  } else if (order == "youngest-first") {
    policy.victim_order = core::VictimOrder::kYoungestFirst;
  } else {
    throw std::invalid_argument("unknown victim order '" + order +
                                "' (want least-lost-work or youngest-first)");
  }
}

const char* VictimOrderName(core::VictimOrder order) {
  return order == core::VictimOrder::kYoungestFirst ? "youngest-first" : "least-lost-work";
}

std::string DescribeSchedulingPolicy(const core::PolicySet& policy) {
  std::string out = policy.queue_order == core::QueueOrder::kFifo ? "fifo" : "multifactor";
  if (policy.backfill.mode != core::BackfillMode::kNone) {
    out += std::string("+") + core::BackfillModeName(policy.backfill.mode);
    if (policy.backfill.order == core::BackfillOrder::kShortestFirst) out += "(shortest-first)";
    if (policy.backfill.mode == core::BackfillMode::kConservative && policy.backfill.keep_plans) {
      out += "(keep-plans)";
    }
    if (policy.backfill.reserve_after > 0) out += "(reserve-after " + std::to_string(policy.backfill.reserve_after) + "s)";
    if (policy.backfill.reserve_after > 0 && policy.backfill.reserve_after_wide > 0) {
      char fraction[32];
      std::snprintf(fraction, sizeof fraction, "%g", policy.backfill.wide_fraction);
      out += "(wide " + std::to_string(policy.backfill.reserve_after_wide) + "s over " + fraction + ")";
    }
  }
  for (const auto& q : policy.qos) {
    if (q.preempt.empty()) continue;
    out += std::string(", ") + VictimOrderName(policy.victim_order) + " victims";
    break;
  }
  return out;
}

std::string DescribePolicy(const core::PolicySet& policy, const SimConfig& config) {
  std::string out = DescribeSchedulingPolicy(policy);
  if (config.exact_runtimes) out += ", exact run times";
  if (config.elastic_min_fraction > 0) {
    out += ", elastic gangs (min " + std::to_string(config.elastic_min_fraction).substr(0, 4) + " of size";
    if (config.speedup_exponent != 1.0) out += ", speed-up k^" + std::to_string(config.speedup_exponent).substr(0, 4);
    out += ")";
  }
  if (!policy.provisioning.empty()) out += ", provisioning (boot " + std::to_string(config.boot_delay_s) + " s)";
  if (config.predict_runtimes)
    out += config.predictor == "online-linear" ? ", online-linear runtime predictions" : ", user-history runtime predictions";
  if ((config.predict_runtimes || config.estimate_with_predictions) && config.predict_correction == "doubling")
    out += ", doubling corrections";
  if ((config.predict_runtimes || config.estimate_with_predictions) && config.predict_history_by == "request")
    out += ", history by request";
  if (!config.predict_runtimes && config.estimate_with_predictions) {
    out += ", start estimates from predicted run times";
  }
  return out;
}

Replay RunReplay(const SimConfig& command_line) {
  Replay r;
  policy::PolicyLoadResult file = ReadPolicy(command_line.policy_path);
  const SimConfig config = WithSimulationSettings(command_line, file.simulation, file.policy->prediction);
  if (config.elastic_min_fraction > 0 && (config.predict_runtimes || config.estimate_with_predictions)) {
    throw std::invalid_argument("--elastic cannot be combined with run-time predictions (--predict-runtimes, "
                                "--estimate-with-predictions or the policy's [prediction])");
  }
  r.trace = LoadTrace(config);
  r.fleet = BuildFleet(config, r.trace);
  r.policy = ApplyOverrides(std::move(*file.policy), config, r.trace);
  r.shares = AccountShares(r.policy);
  if (config.predict_runtimes || config.estimate_with_predictions) {
    const auto by = core::ParseHistoryBy(config.predict_history_by);
    if (!by) throw std::invalid_argument("unknown prediction history '" + config.predict_history_by + "'");
    auto made = core::MakePredictor(config.predictor, *config.predict_history, *config.predict_scale, {}, *by);
    if (!made) throw std::invalid_argument("unknown run-time predictor '" + config.predictor + "'");
    const auto correction = core::ParsePredictionCorrection(config.predict_correction);
    if (!correction) throw std::invalid_argument("unknown prediction correction '" + config.predict_correction + "'");
    made->set_correction(*correction);
    (config.predict_runtimes ? r.predictor : r.estimate_predictor) = std::move(made);
  }
  SimOptions options;
  options.policy = r.policy;
  options.cycle_period_s = *config.cycle_period_s;
  options.seed = *config.seed;
  options.checkpoint_interval_s = *config.checkpoint_interval_s;
  options.predictor = r.predictor.get();
  options.estimate_predictor = r.estimate_predictor.get();
  options.record_series = config.record_series;
  options.estimates = config.estimates;
  options.idle_shortcuts = config.idle_shortcuts;
  options.speedup_exponent = config.speedup_exponent;
  options.boot_delay_s = config.boot_delay_s;
  options.report_cost = config.report_cost;
  options.faults = config.faults;
  r.result = Simulate(r.trace, r.fleet, options);
  r.metrics = ComputeMetrics(r.result, r.shares);
  r.info.trace = r.trace.name;
  r.info.format = r.trace.format;
  r.info.policy = DescribePolicy(r.policy, config);
  r.info.seed = *config.seed;
  r.info.nodes = static_cast<int64_t>(r.fleet.nodes.size());
  r.info.skipped_records = r.trace.skipped;
  return r;
}

}  // namespace mlsched::sim
