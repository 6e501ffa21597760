#include "schedd/sim/predictor.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace mlsched::sim {

core::Duration UserHistoryPredictor::Predict(const TraceJob& job) {
  const core::Duration request = std::max<core::Duration>(job.requested_time, 1);
  auto it = recent_.find(job.spec.user);
  if (it == recent_.end() || it->second.empty()) return request;
  core::Duration sum = 0;
  for (core::Duration d : it->second) sum += d;
  const double mean = static_cast<double>(sum) / static_cast<double>(it->second.size());
  return std::clamp<core::Duration>(static_cast<core::Duration>(std::ceil(mean * scale_)), 1,
                                    request);
}

void UserHistoryPredictor::Observe(const TraceJob& job, core::Duration actual) {
  auto& q = recent_[job.spec.user];
  q.push_back(actual);
  while (static_cast<int>(q.size()) > history_) q.pop_front();
}

core::Duration UserHistoryPredictor::Extend(const TraceJob& job, core::Duration elapsed,
                                            int extensions) {
  static constexpr core::Duration kSteps[] = {60,        300,       900,        1800,
                                              3600,      7200,      5 * 3600,   10 * 3600,
                                              20 * 3600, 50 * 3600, 100 * 3600};
  constexpr int kLast = static_cast<int>(std::size(kSteps)) - 1;
  const core::Duration request = std::max<core::Duration>(job.requested_time, 1);
  const core::Duration step = kSteps[std::clamp(extensions, 0, kLast)];
  return std::min(request, elapsed + step);
}

}  // namespace mlsched::sim
