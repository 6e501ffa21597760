#include "schedd/core/predictor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <iterator>
#include <utility>

namespace mlsched::core {

Duration ExtendPrediction(Duration elapsed, int k, Duration time_limit, PredictionCorrection correction) {
  static constexpr Duration kSteps[] = {60,        300,       900,        1800,
                                        3600,      7200,      5 * 3600,   10 * 3600,
                                        20 * 3600, 50 * 3600, 100 * 3600};
  constexpr int kLast = static_cast<int>(std::size(kSteps)) - 1;
  const Duration limit = std::max<Duration>(time_limit, 1);
  if (correction == PredictionCorrection::kDoubling)
    return std::min(limit, std::max(elapsed + kSteps[0], elapsed > limit / 2 ? limit : 2 * elapsed));
  return std::min(limit, elapsed + kSteps[std::clamp(k, 0, kLast)]);
}

Duration CorrectedPrediction(Duration predicted, Duration elapsed, Duration time_limit,
                             PredictionCorrection correction) {
  const Duration limit = std::max<Duration>(time_limit, 1);
  Duration p = std::clamp<Duration>(predicted, 1, limit);
  for (int k = 0; p <= elapsed && p < limit; ++k) p = ExtendPrediction(p, k, limit, correction);
  return p;
}

std::optional<PredictionCorrection> ParsePredictionCorrection(std::string_view name) {
  if (name == "incremental") return PredictionCorrection::kIncremental;
  if (name == "doubling") return PredictionCorrection::kDoubling;
  return std::nullopt;
}

const char* PredictionCorrectionName(PredictionCorrection c) {
  return c == PredictionCorrection::kDoubling ? "doubling" : "incremental";
}

double RequestedProcessors(const JobFeatures& f) {
  const int64_t gpus = f.per_task.GpuCount();
  const double per_task = gpus > 0 ? static_cast<double>(gpus) : static_cast<double>(f.per_task.cpu_millis) / 1000.0;
  return std::max(1.0, static_cast<double>(f.ntasks)) * std::max(1.0, per_task);
}

std::string RequestTemplateKey(const JobFeatures& f) {
  std::string key = f.user + ':' + std::to_string(f.ntasks) + 'x' + std::to_string(f.per_task.cpu_millis) + "m," +
                    std::to_string(f.per_task.memory_bytes) + 'B';
  for (const auto& [type, n] : f.per_task.gpus) key += ",gpu:" + type + '=' + std::to_string(n);
  return key + '|' + std::to_string(f.time_limit) + 's';
}

std::optional<HistoryBy> ParseHistoryBy(std::string_view name) {
  if (name == "user") return HistoryBy::kUser;
  if (name == "request") return HistoryBy::kRequest;
  return std::nullopt;
}

const char* HistoryByName(HistoryBy by) { return by == HistoryBy::kRequest ? "request" : "user"; }

HistoryBook::HistoryBook(int keep, HistoryBy by, RuntimeHistory initial)
    : keep_(keep < 1 ? 1 : keep), by_(by), history_(std::move(initial)) {
  // Templates in the order they were last observed: those `recent` does not list first.
  std::vector<std::string> listed = std::move(history_.recent), templates;
  history_.recent.clear();
  std::set<std::string> in_order;
  for (const std::string& key : listed)
    if (history_.runs.count(key) && in_order.insert(key).second) templates.push_back(key);
  std::vector<std::string> unlisted;
  for (auto& [key, q] : history_.runs) {
    while (static_cast<int>(q.size()) > keep_) q.pop_front();
    if (key.find(':') != std::string::npos && !in_order.count(key)) unlisted.push_back(key);
  }
  templates.insert(templates.begin(), unlisted.begin(), unlisted.end());
  for (const std::string& key : templates)
    if (key.find(':') != std::string::npos) Touch(key.substr(0, key.find(':')), key);
}

RuntimeHistory HistoryBook::Snapshot() const {
  RuntimeHistory out = history_;
  for (const auto& [user, keys] : recent_) out.recent.insert(out.recent.end(), keys.begin(), keys.end());
  return out;
}

const std::deque<Duration>* HistoryBook::RunsFor(const JobFeatures& f) const {
  if (by_ == HistoryBy::kRequest) {
    auto t = history_.runs.find(RequestTemplateKey(f));
    if (t != history_.runs.end() && !t->second.empty()) return &t->second;
  }
  auto u = history_.runs.find(f.user);
  return u == history_.runs.end() || u->second.empty() ? nullptr : &u->second;
}

std::vector<std::string> HistoryBook::KeysOf(const JobFeatures& f) const {
  if (by_ == HistoryBy::kRequest) return {f.user, RequestTemplateKey(f)};
  return {f.user};
}

void HistoryBook::Add(const JobFeatures& f, Duration actual) {
  for (const std::string& key : KeysOf(f)) {
    auto& q = history_.runs[key];
    q.push_back(std::max<Duration>(actual, 0));
    while (static_cast<int>(q.size()) > keep_) q.pop_front();
    if (key != f.user) Touch(f.user, key);
  }
}

void HistoryBook::Touch(const std::string& user, const std::string& key) {
  std::vector<std::string>& keys = recent_[user];
  if (auto it = std::find(keys.begin(), keys.end(), key); it != keys.end()) keys.erase(it);
  keys.push_back(key);
  if (keys.size() > static_cast<size_t>(kMaxTemplatesPerUser)) {
    history_.runs.erase(keys.front());
    dropped_.push_back(std::move(keys.front()));
    keys.erase(keys.begin());
  }
}

UserMeanPredictor::UserMeanPredictor(int history, double scale, RuntimeHistory initial, HistoryBy by)
    : RuntimePredictor(HistoryBook(history, by, std::move(initial))), scale_(scale > 0 ? scale : 1.0) {}

namespace {

/// Mean of the last `k` run times of `runs` (at least one); seconds.
double MeanOfLast(const std::deque<Duration>& runs, int k) {
  const size_t n = std::min(runs.size(), static_cast<size_t>(k));
  double sum = 0;
  for (size_t i = runs.size() - n; i < runs.size(); ++i) sum += static_cast<double>(runs[i]);
  return sum / static_cast<double>(n);
}

Duration Capped(double seconds, Duration time_limit) {
  const Duration limit = std::max<Duration>(time_limit, 1);
  if (!std::isfinite(seconds) || seconds >= static_cast<double>(limit)) return limit;
  return std::clamp<Duration>(static_cast<Duration>(std::ceil(seconds)), 1, limit);
}

double Ln(double seconds) { return std::log(std::max(seconds, 1.0)); }

}  // namespace

Duration UserMeanPredictor::Predict(const JobFeatures& f) const {
  const std::deque<Duration>* runs = book_.RunsFor(f);
  if (runs == nullptr) return std::max<Duration>(f.time_limit, 1);
  return Capped(MeanOfLast(*runs, book_.keep()) * scale_, f.time_limit);
}

void UserMeanPredictor::Observe(const JobFeatures& f, Duration actual) { book_.Add(f, actual); }

namespace {
constexpr int kMinKept = 3;             // runs the online model's features read
constexpr double kForgetting = 0.999;   // RLS forgetting factor
constexpr double kInitialP = 100.0;     // P(0) = kInitialP x I: a weak prior on w = 0
constexpr double kMaxTrace = 1000.0;    // bounded-trace RLS: P is scaled down beyond this trace
constexpr int64_t kMaxObservations = int64_t{1} << 50;  // the count saturates here
}  // namespace

OnlineLinearPredictor::OnlineLinearPredictor(int history, double scale, RuntimeHistory initial, HistoryBy by)
    : RuntimePredictor(HistoryBook(std::max(history, kMinKept), by, std::move(initial))),
      k_(history < 1 ? 1 : history), scale_(scale > 0 ? scale : 1.0), w_(kFeatures, 0.0),
      p_(kFeatures * kFeatures, 0.0) {
  for (int i = 0; i < kFeatures; ++i) p_[i * kFeatures + i] = kInitialP;
}

OnlineLinearPredictor::Features OnlineLinearPredictor::FeaturesOf(const JobFeatures& f,
                                                                  const std::deque<Duration>& runs) const {
  auto last = [&](size_t back) {  // the back-th latest run; a missing one repeats the oldest kept
    return static_cast<double>(runs[runs.size() - 1 - std::min(back, runs.size() - 1)]);
  };
  return Features{1.0, Ln(static_cast<double>(f.time_limit)), Ln(RequestedProcessors(f)), Ln(last(0)),
                  Ln(last(1)), Ln(last(2)), Ln(MeanOfLast(runs, k_))};
}

Duration OnlineLinearPredictor::Predict(const JobFeatures& f) const {
  // Per pending job per cycle: one history lookup, no allocation (but the template key's, with
  // HistoryBy::kRequest).
  const std::deque<Duration>* runs = book_.RunsFor(f);
  if (runs == nullptr) return std::max<Duration>(f.time_limit, 1);
  if (n_ < kWarmup) return Capped(MeanOfLast(*runs, k_) * scale_, f.time_limit);
  const Features x = FeaturesOf(f, *runs);
  double y = 0;
  for (int i = 0; i < kFeatures; ++i) y += w_[i] * x[i];
  // exp(E[ln t] + var/2): the mean of a log-normal run time, not its median (which would
  // under-predict half the jobs).
  return Capped(std::exp(std::min(y + var_ / 2, 50.0)) * scale_, f.time_limit);
}

void OnlineLinearPredictor::Observe(const JobFeatures& f, Duration actual) {
  // Features as the history stood before this run is added (an approximation of what was known
  // at submission: runs that ended while the job was queued or running are included).
  if (const std::deque<Duration>* runs = book_.RunsFor(f)) {
    const Features x = FeaturesOf(f, *runs);
    Features px{};  // P x
    for (int i = 0; i < kFeatures; ++i)
      for (int j = 0; j < kFeatures; ++j) px[i] += p_[i * kFeatures + j] * x[j];
    double denom = kForgetting, err = Ln(static_cast<double>(actual));
    for (int i = 0; i < kFeatures; ++i) denom += x[i] * px[i], err -= w_[i] * x[i];
    const std::vector<double> w_before = w_, p_before = p_;
    const double var_before = var_;
    if (std::isfinite(denom) && denom > 0 && std::isfinite(err)) {
      // The error variance counts the errors of the model that predicts (after the warm-up): a
      // running mean at first, then exponentially weighted like the fit.
      if (n_ >= kWarmup) {
        const double alpha = std::max(1.0 / static_cast<double>(n_ - kWarmup + 1), 1 - kForgetting);
        var_ += alpha * (err * err - var_);
      }
      double trace = 0;
      for (int i = 0; i < kFeatures; ++i) {
        w_[i] += px[i] / denom * err;  // gain k = P x / (lambda + x'P x)
        for (int j = 0; j < kFeatures; ++j)  // P = (P - k x'P) / lambda; P is symmetric
          p_[i * kFeatures + j] = (p_[i * kFeatures + j] - px[i] * px[j] / denom) / kForgetting;
        trace += p_[i * kFeatures + i];
      }
      if (trace > kMaxTrace)
        for (double& v : p_) v *= kMaxTrace / trace;
      const bool finite = std::isfinite(var_) && std::all_of(w_.begin(), w_.end(), [](double v) { return std::isfinite(v); }) &&
                          std::all_of(p_.begin(), p_.end(), [](double v) { return std::isfinite(v); });
      if (finite) {
        if (n_ < kMaxObservations) ++n_;
      } else {  // an update that overflowed is dropped, not kept to poison every later one
        w_ = w_before, p_ = p_before, var_ = var_before;
      }
    }
  }
  book_.Add(f, actual);
}

std::string OnlineLinearPredictor::ModelState() const {
  std::string out = "online-linear/2 " + std::to_string(n_);
  char v[40];
  std::snprintf(v, sizeof v, " %.17g", var_);
  out += v;
  char buf[40];
  for (const std::vector<double>* v : {&w_, &p_})
    for (double d : *v) {
      std::snprintf(buf, sizeof buf, " %.17g", d);
      out += buf;
    }
  return out;
}

bool OnlineLinearPredictor::RestoreModel(std::string_view text) {
  constexpr std::string_view kTag = "online-linear/2 ";
  if (text.substr(0, kTag.size()) != kTag || text.size() > 4096) return false;
  std::istringstream in{std::string(text.substr(kTag.size()))};
  int64_t n = -1;
  std::vector<double> v(kFeatures + kFeatures * kFeatures);
  double var = -1;
  if (!(in >> n) || n < 0 || n > kMaxObservations || !(in >> var) || !std::isfinite(var) || var < 0) return false;
  for (double& d : v)
    if (!(in >> d) || !std::isfinite(d)) return false;
  std::string rest;
  if (in >> rest) return false;  // trailing garbage
  // P must be what Observe keeps: a positive diagonal within the bounded trace.
  double trace = 0;
  for (int i = 0; i < kFeatures; ++i) {
    const double d = v[kFeatures + i * kFeatures + i];
    if (!(d > 0)) return false;
    trace += d;
  }
  if (trace > kMaxTrace * (1 + 1e-9)) return false;
  n_ = n;
  var_ = var;
  w_.assign(v.begin(), v.begin() + kFeatures);
  p_.assign(v.begin() + kFeatures, v.end());
  return true;
}

std::unique_ptr<RuntimePredictor> MakePredictor(const std::string& name, int history, double scale,
                                                RuntimeHistory initial, HistoryBy by) {
  if (name == "user-mean") return std::make_unique<UserMeanPredictor>(history, scale, std::move(initial), by);
  if (name == "online-linear")
    return std::make_unique<OnlineLinearPredictor>(history, scale, std::move(initial), by);
  return nullptr;
}

}  // namespace mlsched::core
