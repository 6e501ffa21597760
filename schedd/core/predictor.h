// Run-time prediction for planning. Users' time limits are usually far too long; planning
// (backfill reservations, shortest-first order, expected starts) may use a prediction from the
// users' history instead. Predictions are for planning only: only the time limit ends a job.
// Pure: the history is a value the caller keeps (schedd persists it, mlsim holds it in memory).
#pragma once

#include <deque>
#include <map>
#include <string>

#include "schedd/core/types.h"

namespace mlsched::core {

/// Recent actual run times (seconds) per user, oldest first, at most a predictor's `history`
/// per user.
struct RuntimeHistory {
  std::map<std::string, std::deque<Duration>> runs;
  bool operator==(const RuntimeHistory&) const = default;
};

/// The `k`-th correction of a prediction (k = 0, 1, ...) that a job has reached while still
/// running after `elapsed` seconds: `elapsed` plus the k-th step of 1 min, 5 min, 15 min, 30 min,
/// 1 h, 2 h, 5 h, 10 h, 20 h, 50 h, 100 h (the last repeats), capped at `time_limit`: Tsafrir,
/// Etsion & Feitelson's incremental correction (TPDS 2007), one of those compared by Gaussier et
/// al., "Improving Backfilling by using Machine Learning to Predict Running Times", SC'15. Seconds.
Duration ExtendPrediction(Duration elapsed, int k, Duration time_limit);

/// A running job's prediction after `elapsed` seconds: `predicted`, raised by successive
/// ExtendPrediction steps (k = 0, 1, ...) for as long as the job has outlived it, capped at
/// `time_limit`. The same sequence mlsim applies event by event, as a function of the elapsed
/// time (for callers that keep no per-job correction state). Seconds.
Duration CorrectedPrediction(Duration predicted, Duration elapsed, Duration time_limit);

/// A source of planning run times.
class RuntimePredictor {
 public:
  virtual ~RuntimePredictor() = default;
  /// Predicted run time (seconds) of a job of `user` with `time_limit`: in [1, max(time_limit, 1)].
  virtual Duration Predict(const std::string& user, Duration time_limit) const = 0;
  /// A job of `user` ended after `actual` seconds of run time.
  virtual void Observe(const std::string& user, Duration actual) = 0;
  /// A running job reached its prediction for the (k+1)-th time after `elapsed` seconds: its new
  /// prediction (> elapsed unless capped at `time_limit`). Defaults to ExtendPrediction.
  virtual Duration Extend(Duration elapsed, int k, Duration time_limit) const {
    return ExtendPrediction(elapsed, k, time_limit);
  }
};

/// Tsafrir, Etsion & Feitelson, "Backfilling Using System-Generated Predictions Rather than User
/// Runtime Estimates", IEEE TPDS 18(6), 2007: the prediction is the mean run time of the user's
/// last `history` (paper: 2) finished jobs, times `scale`, capped at the job's time limit; a user
/// without history gets the time limit. Corrections on overrun: ExtendPrediction.
class UserMeanPredictor : public RuntimePredictor {
 public:
  /// history: run times kept and averaged per user (< 1 counts as 1); scale: multiplies the mean
  /// (<= 0 counts as 1), trading early reservations for fewer corrections. `initial`: a history
  /// kept from before (e.g. reloaded after a restart), trimmed to `history` per user.
  explicit UserMeanPredictor(int history = 2, double scale = 1.0, RuntimeHistory initial = {});
  Duration Predict(const std::string& user, Duration time_limit) const override;
  void Observe(const std::string& user, Duration actual) override;
  /// The history as it stands (what a caller persists).
  const RuntimeHistory& history() const { return history_; }
  int history_length() const { return k_; }

 private:
  int k_;
  double scale_;
  RuntimeHistory history_;
};

}  // namespace mlsched::core
