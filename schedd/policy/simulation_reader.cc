// PolicyReader: [simulation], the settings only the simulator (mlsim) has, so that the policy file
// schedd runs is also the one mlsim replays. schedd checks them like every other table (a misspelt
// key is a FILE:LINE:COL error for both) and then ignores them. And [prediction], the run-time
// prediction both schedd and mlsim plan with (mlsim: unless [simulation] or its options say
// otherwise).
#include "schedd/core/predictor.h"
#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

void PolicyReader::ReadSimulation(const toml::table& t, SimulationSettings& s) {
  const std::string ctx = "[simulation]";
  CheckKeys(t, {"exact_runtimes", "predict_runtimes", "predict_history", "predict_scale", "cycle_period",
                "checkpoint_interval", "seed"},
            ctx);
  Bool(t, "exact_runtimes", s.exact_runtimes, ctx);
  Bool(t, "predict_runtimes", s.predict_runtimes, ctx);
  // An optional setting is set only when its key is present and `read` reported no error.
  auto present_and_valid = [&](const char* key, auto&& read) {
    if (!t.get(key)) return false;
    const size_t before = errors_.size();
    read();
    return errors_.size() == before;
  };
  int32_t history = 0;
  if (present_and_valid("predict_history", [&] { Int32(t, "predict_history", history, 1, ctx); }))
    s.predict_history = history;
  double scale = 0;
  if (present_and_valid("predict_scale", [&] { Num(t, "predict_scale", scale, ctx); })) {
    if (scale > 0) s.predict_scale = scale;
    else Error(t.get("predict_scale")->source(), "'predict_scale' in [simulation]: must be > 0");
  }
  core::Duration period = 0, interval = 0;
  if (present_and_valid("cycle_period", [&] { Dur(t, "cycle_period", period, ctx); })) s.cycle_period = period;
  if (present_and_valid("checkpoint_interval", [&] { Dur(t, "checkpoint_interval", interval, ctx); }))
    s.checkpoint_interval = interval;
  int64_t seed = 0;
  if (present_and_valid("seed", [&] { Int(t, "seed", seed, 0, ctx); })) s.seed = static_cast<uint64_t>(seed);
}

void PolicyReader::ReadPrediction(const toml::table& t, core::PredictionPolicy& p) {
  const std::string ctx = "[prediction]";
  CheckKeys(t, {"enabled", "predictor", "history", "correction", "history_by"}, ctx);
  Bool(t, "enabled", p.enabled, ctx);
  Str(t, "predictor", p.predictor, ctx);
  if (t.get("predictor") && p.predictor != "user-mean" && p.predictor != "online-linear")
    Error(t.get("predictor")->source(), "'predictor' in [prediction]: expected \"user-mean\" or \"online-linear\", got \"" +
                                            p.predictor + "\"");
  const size_t before = errors_.size();
  Int32(t, "history", p.history, 1, ctx);
  if (errors_.size() == before && p.history > kMaxPredictionHistory)
    Error(t.get("history")->source(), "'history' in [prediction]: must be <= " +
                                          std::to_string(kMaxPredictionHistory) + ", got " +
                                          std::to_string(p.history));
  std::string correction;
  const size_t before_correction = errors_.size();
  Str(t, "correction", correction, ctx);
  if (t.get("correction") && errors_.size() == before_correction) {  // a string: is it a known one?
    if (auto c = core::ParsePredictionCorrection(correction)) p.correction = *c;
    else
      Error(t.get("correction")->source(),
            "'correction' in [prediction]: expected \"incremental\" or \"doubling\", got \"" + correction + "\"");
  }
  std::string by;
  const size_t before_by = errors_.size();
  Str(t, "history_by", by, ctx);
  if (t.get("history_by") && errors_.size() == before_by) {
    if (auto b = core::ParseHistoryBy(by)) p.history_by = *b;
    else
      Error(t.get("history_by")->source(),
            "'history_by' in [prediction]: expected \"user\" or \"request\", got \"" + by + "\"");
  }
}

}  // namespace mlsched::policy
