// Run-time prediction for planning. Users' time limits are usually far too long; planning
// (backfill reservations, shortest-first order, expected starts) may use a prediction from the
// users' history instead. Predictions are for planning only: only the time limit ends a job.
// Pure: the history is a value the caller keeps (schedd persists it, mlsim holds it in memory).
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// Recent actual run times (seconds) per key, oldest first, at most a predictor's `history` per
/// key. A key is a user name or a request template of that user (RequestTemplateKey).
struct RuntimeHistory {
  std::map<std::string, std::deque<Duration>> runs;
  /// Template keys, least recently observed first (HistoryBook drops from the front): filled by
  /// HistoryBook::Snapshot; a history given to a HistoryBook without it is taken in key order.
  std::vector<std::string> recent;
  bool operator==(const RuntimeHistory&) const = default;
};

/// The `k`-th correction of a prediction (k = 0, 1, ...) that a job has reached while still
/// running after `elapsed` seconds: `elapsed` plus the k-th step of 1 min, 5 min, 15 min, 30 min,
/// 1 h, 2 h, 5 h, 10 h, 20 h, 50 h, 100 h (the last repeats), capped at `time_limit`: Tsafrir,
/// Etsion & Feitelson's incremental correction (TPDS 2007), one of those compared by Gaussier et
/// al., "Improving Backfilling by using Machine Learning to Predict Running Times", SC'15. Seconds.
/// With PredictionCorrection::kDoubling: max(2 x elapsed, elapsed + 1 min), capped the same way.
Duration ExtendPrediction(Duration elapsed, int k, Duration time_limit,
                          PredictionCorrection correction = PredictionCorrection::kIncremental);

/// "incremental" / "doubling" (the policy's [prediction] correction); nullopt for anything else.
std::optional<PredictionCorrection> ParsePredictionCorrection(std::string_view name);
/// The policy name of `c` ("incremental" or "doubling").
const char* PredictionCorrectionName(PredictionCorrection c);

/// A running job's prediction after `elapsed` seconds: `predicted`, raised by successive
/// ExtendPrediction steps (k = 0, 1, ...) for as long as the job has outlived it, capped at
/// `time_limit`. The same sequence mlsim applies event by event, as a function of the elapsed
/// time (for callers that keep no per-job correction state). Seconds.
Duration CorrectedPrediction(Duration predicted, Duration elapsed, Duration time_limit,
                             PredictionCorrection correction = PredictionCorrection::kIncremental);

/// What a predictor knows of a job: its user, requested time limit (seconds), task count and
/// per-task request.
struct JobFeatures {
  std::string user;
  Duration time_limit = 0;
  int32_t ntasks = 1;
  ResourceVector per_task;
};

/// The processors `f` asks for: tasks x GPUs per task when it asks for GPUs, else tasks x CPU
/// cores per task (at least 1 each). A trace's one-task job of N processors counts N.
double RequestedProcessors(const JobFeatures& f);

/// The history key of `f`'s request template: "USER:NxCPUm,MEMB,gpu:TYPE=N,...|LIMITs". The
/// user's own key is the user name; a key's user is what precedes its first ':', which a user name
/// never holds (passwd(5) separates its fields with ':').
std::string RequestTemplateKey(const JobFeatures& f);

/// "user" / "request" (the policy's [prediction] history_by); nullopt for anything else.
std::optional<HistoryBy> ParseHistoryBy(std::string_view name);
/// The policy name of `by` ("user" or "request").
const char* HistoryByName(HistoryBy by);

/// The run times a predictor reads: per user and, with HistoryBy::kRequest, per request template
/// (RequestTemplateKey) as well, at most `keep` per key, oldest first. A user keeps at most
/// kMaxTemplatesPerUser templates: the least recently observed one beyond that is dropped (and
/// reported by TakeDropped, so that a caller deletes it from its store; a caller that keeps no
/// store drains it too).
class HistoryBook {
 public:
  static constexpr int kMaxTemplatesPerUser = 64;
  /// keep: run times per key (< 1 counts as 1); `initial`: a history kept from before, each key
  /// trimmed to `keep` and each user to kMaxTemplatesPerUser templates (whatever the `by`).
  HistoryBook(int keep, HistoryBy by, RuntimeHistory initial);
  /// The runs a prediction for `f` reads: its template's when it has any (kRequest), else its
  /// user's; nullptr when the user has none.
  const std::deque<Duration>* RunsFor(const JobFeatures& f) const;
  /// Adds a run of `actual` seconds (negative counts as 0) under every key in KeysOf(f).
  void Add(const JobFeatures& f, Duration actual);
  /// The keys Add(f) writes: f's user, and with kRequest its template.
  std::vector<std::string> KeysOf(const JobFeatures& f) const;
  /// Template keys dropped since the last call (least recently observed, or trimmed at start).
  std::vector<std::string> TakeDropped() { return std::exchange(dropped_, {}); }
  /// The runs (`recent` left empty: see Snapshot).
  const RuntimeHistory& history() const { return history_; }
  /// The runs and the templates' order of use (`recent`): what a new HistoryBook continues from.
  RuntimeHistory Snapshot() const;
  int keep() const { return keep_; }
  HistoryBy by() const { return by_; }

 private:
  void Touch(const std::string& user, const std::string& key);  // most recent; drops beyond the cap
  int keep_;
  HistoryBy by_;
  RuntimeHistory history_;
  std::map<std::string, std::vector<std::string>> recent_;  // user -> template keys, least recent first
  std::vector<std::string> dropped_;
};

/// A source of planning run times.
class RuntimePredictor {
 public:
  virtual ~RuntimePredictor() = default;
  /// Predicted run time (seconds) of the job `f`: in [1, max(f.time_limit, 1)].
  virtual Duration Predict(const JobFeatures& f) const = 0;
  /// The job `f` ended after `actual` seconds of run time.
  virtual void Observe(const JobFeatures& f, Duration actual) = 0;
  /// Predict / Observe for a one-task job of `user`.
  Duration Predict(const std::string& user, Duration time_limit) const { return Predict(JobFeatures{user, time_limit, 1, {}}); }
  void Observe(const std::string& user, Duration actual) { Observe(JobFeatures{user, 0, 1, {}}, actual); }
  /// The run times as they stand, per user and per request template (what a caller persists
  /// beside the model state).
  const RuntimeHistory& history() const { return book_.history(); }
  /// The same with the templates' order of use (HistoryBook::Snapshot): for a predictor that
  /// replaces this one.
  RuntimeHistory HistorySnapshot() const { return book_.Snapshot(); }
  /// The history keys Observe(f) writes (HistoryBook::KeysOf): what a caller persists after it.
  std::vector<std::string> HistoryKeys(const JobFeatures& f) const { return book_.KeysOf(f); }
  /// Template keys dropped since the last call (HistoryBook::TakeDropped): delete them from the store.
  std::vector<std::string> TakeDroppedHistory() { return book_.TakeDropped(); }
  HistoryBy history_by() const { return book_.by(); }
  /// A learned model's state as text ("" for predictors without one), and its restore: false
  /// (and the state unchanged) when `text` is not a state this predictor wrote.
  virtual std::string ModelState() const { return ""; }
  virtual bool RestoreModel(std::string_view text) { return text.empty(); }
  /// A running job reached its prediction for the (k+1)-th time after `elapsed` seconds: its new
  /// prediction (> elapsed unless capped at `time_limit`): ExtendPrediction with correction().
  virtual Duration Extend(Duration elapsed, int k, Duration time_limit) const {
    return ExtendPrediction(elapsed, k, time_limit, correction_);
  }
  /// How Extend corrects a prediction a job outlived (incremental unless set).
  PredictionCorrection correction() const { return correction_; }
  void set_correction(PredictionCorrection c) { correction_ = c; }

 protected:
  explicit RuntimePredictor(HistoryBook book) : book_(std::move(book)) {}
  HistoryBook book_;

 private:
  PredictionCorrection correction_ = PredictionCorrection::kIncremental;
};

/// Tsafrir, Etsion & Feitelson, "Backfilling Using System-Generated Predictions Rather than User
/// Runtime Estimates", IEEE TPDS 18(6), 2007: the prediction is the mean run time of the user's
/// last `history` (paper: 2) finished jobs (with HistoryBy::kRequest: of the same request when
/// there are any), times `scale`, capped at the job's time limit; a user without history gets the
/// time limit. Corrections on overrun: ExtendPrediction.
class UserMeanPredictor : public RuntimePredictor {
 public:
  /// history: run times kept and averaged per key (< 1 counts as 1); scale: multiplies the mean
  /// (<= 0 counts as 1), trading early reservations for fewer corrections. `initial`: a history
  /// kept from before (e.g. reloaded after a restart), trimmed to `history` per key.
  explicit UserMeanPredictor(int history = 2, double scale = 1.0, RuntimeHistory initial = {},
                             HistoryBy by = HistoryBy::kUser);
  using RuntimePredictor::Observe;
  using RuntimePredictor::Predict;
  Duration Predict(const JobFeatures& f) const override;
  void Observe(const JobFeatures& f, Duration actual) override;
  int history_length() const { return book_.keep(); }

 private:
  double scale_;
};

/// An online-learned linear model of log run time (the approach of Gaussier, Glesser, Reis &
/// Trystram, "Improving Backfilling by using Machine Learning to Predict Running Times", SC'15:
/// a linear model over the job's request and its user's recent run times, updated after every
/// job). Fitted by exponentially weighted recursive least squares (Haykin, "Adaptive Filter
/// Theory", ch. 10; forgetting factor 0.999, so the last ~1,000 jobs weigh most) on
///   y = ln(run time), x = [1, ln(time limit), ln(processors), ln(last run), ln(second last),
///                          ln(third last), ln(mean of the user's last `history` runs)]
/// (processors: RequestedProcessors, the SC'15 models' requested processor count)
/// (each argument floored at 1 s; a missing run repeats the oldest kept one, and a user without history
/// is predicted their time limit, as UserMeanPredictor does). The prediction is the log-normal
/// mean exp(w.x + v/2) x `scale`, v the weighted mean squared error, capped to [1, time limit]. Until `kWarmup` jobs have been observed it
/// falls back to the user mean (jobs of users without history do not train it). Deterministic; the state (weights, inverse correlation matrix,
/// count) is text for persistence (ModelState). Corrections on overrun: ExtendPrediction.
class OnlineLinearPredictor : public RuntimePredictor {
 public:
  static constexpr int kFeatures = 7;
  static constexpr int64_t kWarmup = 32;
  /// history: run times kept per user (at least 3 are kept for the features; the user mean
  /// averages the last `history`); scale: multiplies the prediction (<= 0 counts as 1).
  /// by: whose runs the features read (HistoryBook::RunsFor).
  explicit OnlineLinearPredictor(int history = 2, double scale = 1.0, RuntimeHistory initial = {},
                                 HistoryBy by = HistoryBy::kUser);
  using RuntimePredictor::Observe;
  using RuntimePredictor::Predict;
  Duration Predict(const JobFeatures& f) const override;
  void Observe(const JobFeatures& f, Duration actual) override;
  /// "online-linear/2 N v w0..w6 P00..P66": N observations, then 1 + 7 + 49 numbers (%.17g).
  /// (/1, whose size feature was ln(tasks), is refused: the model starts afresh.)
  /// RestoreModel refuses anything else, N above 2^50, non-finite numbers and a P whose diagonal
  /// is not positive or whose trace is above the bound Observe keeps.
  std::string ModelState() const override;
  bool RestoreModel(std::string_view text) override;
  int64_t observations() const { return n_; }

 private:
  using Features = std::array<double, kFeatures>;
  /// The feature vector x of `f`, whose history (HistoryBook::RunsFor) is `runs` (not empty).
  Features FeaturesOf(const JobFeatures& f, const std::deque<Duration>& runs) const;
  int k_;
  double scale_;
  std::vector<double> w_;  // kFeatures weights
  std::vector<double> p_;  // kFeatures x kFeatures inverse correlation matrix, row-major
  int64_t n_ = 0;
  double var_ = 0;  // exponentially weighted mean of squared a-priori errors (ln s)^2
};

/// The predictor the policy's [prediction] `predictor` names ("user-mean" or "online-linear"),
/// with `history` runs kept per key, `scale` (1 = none), a history kept from before and the
/// history it reads (`by`). nullptr for an unknown name (the policy loader refuses those first).
std::unique_ptr<RuntimePredictor> MakePredictor(const std::string& name, int history, double scale,
                                                RuntimeHistory initial = {}, HistoryBy by = HistoryBy::kUser);

}  // namespace mlsched::core
