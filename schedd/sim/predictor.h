// Runtime predictors: the time limit the core plans backfill with may come from the users'
// history instead of their (usually far too long) requested times. The job is still killed only
// at its requested time; the predictor corrects itself when a job outlives its prediction.
#pragma once

#include <deque>
#include <map>
#include <string>

#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// A source of time limits for the core's planning.
class RuntimePredictor {
 public:
  virtual ~RuntimePredictor() = default;
  /// Predicted run time (seconds) at submission; in [1, job.requested_time].
  virtual core::Duration Predict(const TraceJob& job) = 0;
  /// A job finished normally after `actual` seconds of its last attempt.
  virtual void Observe(const TraceJob& job, core::Duration actual) = 0;
  /// The job has run `elapsed` seconds, reaching its prediction for the (extensions+1)-th time
  /// this attempt: a new prediction (> elapsed, capped at the requested time).
  virtual core::Duration Extend(const TraceJob& job, core::Duration elapsed, int extensions) = 0;
};

/// Tsafrir, Etsion & Feitelson, "Backfilling Using System-Generated Predictions Rather Than User
/// Runtime Estimates", IEEE TPDS 18(6), 2007: the prediction is the mean run time of the user's
/// last two finished jobs (capped at the request); a user without history gets the request.
/// The k-th time a job outlives its prediction it is extended by the k-th step of 1 min, 5 min,
/// 15 min, 30 min, 1 h, 2 h, 5 h, 10 h, 20 h, 50 h, 100 h (the last repeats), never beyond its
/// request (the paper's incremental correction).
class UserHistoryPredictor : public RuntimePredictor {
 public:
  /// history: number of the user's most recent run times averaged (>= 1); scale: the mean is
  /// multiplied by this (> 0) before capping, trading early reservations for fewer corrections.
  explicit UserHistoryPredictor(int history = 2, double scale = 1.0)
      : history_(history < 1 ? 1 : history), scale_(scale > 0 ? scale : 1.0) {}
  core::Duration Predict(const TraceJob& job) override;
  void Observe(const TraceJob& job, core::Duration actual) override;
  core::Duration Extend(const TraceJob& job, core::Duration elapsed, int extensions) override;

 private:
  int history_;
  double scale_;
  std::map<std::string, std::deque<core::Duration>> recent_;  // user -> last run times
};

}  // namespace mlsched::sim
