#include "schedd/core/predictor.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace mlsched::core {

Duration ExtendPrediction(Duration elapsed, int k, Duration time_limit) {
  static constexpr Duration kSteps[] = {60,        300,       900,        1800,
                                        3600,      7200,      5 * 3600,   10 * 3600,
                                        20 * 3600, 50 * 3600, 100 * 3600};
  constexpr int kLast = static_cast<int>(std::size(kSteps)) - 1;
  const Duration limit = std::max<Duration>(time_limit, 1);
  return std::min(limit, elapsed + kSteps[std::clamp(k, 0, kLast)]);
}

Duration CorrectedPrediction(Duration predicted, Duration elapsed, Duration time_limit) {
  const Duration limit = std::max<Duration>(time_limit, 1);
  Duration p = std::clamp<Duration>(predicted, 1, limit);
  for (int k = 0; p <= elapsed && p < limit; ++k) p = ExtendPrediction(p, k, limit);
  return p;
}

UserMeanPredictor::UserMeanPredictor(int history, double scale, RuntimeHistory initial)
    : k_(history < 1 ? 1 : history), scale_(scale > 0 ? scale : 1.0), history_(std::move(initial)) {
  for (auto& [user, q] : history_.runs)
    while (static_cast<int>(q.size()) > k_) q.pop_front();
}

Duration UserMeanPredictor::Predict(const std::string& user, Duration time_limit) const {
  const Duration limit = std::max<Duration>(time_limit, 1);
  auto it = history_.runs.find(user);
  if (it == history_.runs.end() || it->second.empty()) return limit;
  Duration sum = 0;
  for (Duration d : it->second) sum += d;
  const double mean = static_cast<double>(sum) / static_cast<double>(it->second.size());
  return std::clamp<Duration>(static_cast<Duration>(std::ceil(mean * scale_)), 1, limit);
}

void UserMeanPredictor::Observe(const std::string& user, Duration actual) {
  auto& q = history_.runs[user];
  q.push_back(std::max<Duration>(actual, 0));
  while (static_cast<int>(q.size()) > k_) q.pop_front();
}

}  // namespace mlsched::core
