#include "schedd/sim/plot.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

namespace mlsched::sim {
namespace {

using core::Duration;
using core::Timestamp;

/// Adds weight x (overlap of [from, to) with each bucket) into `acc`.
void AddInterval(std::vector<double>& acc, Timestamp start, Duration bucket, Timestamp from,
                 Timestamp to, double weight) {
  if (to <= from || acc.empty()) return;
  const auto n = static_cast<int64_t>(acc.size());
  for (int64_t b = std::max<int64_t>(0, (from - start) / bucket); b < n; ++b) {
    const Timestamp b0 = start + b * bucket, b1 = b0 + bucket;
    const Timestamp lo = std::max(from, b0), hi = std::min(to, b1);
    if (hi > lo) acc[static_cast<size_t>(b)] += weight * static_cast<double>(hi - lo);
    if (to <= b1) break;
  }
}

/// Account -> series index: the `top` accounts with the most resource-seconds (ties by name),
/// the rest -> "other". Fills `names`.
std::map<std::string, size_t> RankAccounts(const SimResult& result, int top,
                                           std::vector<std::string>& names) {
  std::map<std::string, double> usage;
  for (const JobOutcome& j : result.jobs) {
    if (!j.infeasible.empty()) continue;
    double& u = usage[j.account];
    for (const RunSpan& r : j.runs) u += static_cast<double>(j.size * (r.end - r.start));
  }
  std::vector<std::pair<std::string, double>> ranked(usage.begin(), usage.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t keep = std::min(ranked.size(), static_cast<size_t>(std::max(top, 1)));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (i < keep) names.push_back(ranked[i].first);
    index[ranked[i].first] = std::min(i, keep);
  }
  if (ranked.size() > keep) names.push_back("other");
  return index;
}

// ---- SVG ---------------------------------------------------------------------------------

constexpr double kWidth = 1000, kLeft = 70, kRight = 200, kTop = 72, kPanelH = 150, kGap = 64;
constexpr std::array<const char*, 8> kColors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

/// Fixed-point text of `v` with `digits` decimals; locale-independent.
std::string Num(double v, int digits = 1) {
  std::array<char, 48> buf{};
  if (!std::isfinite(v)) v = 0;
  v += 0.0;  // no "-0.0"
  auto r = std::to_chars(buf.data(), buf.data() + buf.size(), v, std::chars_format::fixed, digits);
  return std::string(buf.data(), r.ptr);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

/// One panel: its plot area and y range [0, ymax].
struct Panel {
  double x = 0, y = 0, w = 0, h = 0;
  double ymax = 1, ystep = 1;
  bool percent = false;
  double X(const PlotSeries& s, double t) const {
    return x + w * (t - static_cast<double>(s.start)) / static_cast<double>(s.end - s.start);
  }
  double Y(double v) const { return y + h - h * std::clamp(v, 0.0, ymax) / ymax; }
};

/// The smallest 1/2/5 x 10^k step with at most four steps up to `v`, and the axis maximum.
std::pair<double, double> NiceAxis(double v) {
  if (!(v > 0)) return {1, 0.25};
  const double raw = v / 4;
  double step = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * step >= raw * (1 - 1e-9)) {
      step *= m;
      break;
    }
  }
  return {std::ceil(v / step - 1e-9) * step, step};
}

struct TimeStep {
  Duration seconds, unit;
  const char* suffix;
  const char* name;
};

/// A tick step giving at most 8 ticks over `span` seconds, labelled in its unit.
TimeStep ChooseTimeStep(Duration span) {
  static constexpr std::array<TimeStep, 26> kSteps = {{
      {1, 1, "s", "seconds"},          {2, 1, "s", "seconds"},         {5, 1, "s", "seconds"},
      {10, 1, "s", "seconds"},         {15, 1, "s", "seconds"},        {30, 1, "s", "seconds"},
      {60, 60, "m", "minutes"},        {120, 60, "m", "minutes"},      {300, 60, "m", "minutes"},
      {600, 60, "m", "minutes"},       {900, 60, "m", "minutes"},      {1800, 60, "m", "minutes"},
      {3600, 3600, "h", "hours"},      {7200, 3600, "h", "hours"},     {10800, 3600, "h", "hours"},
      {21600, 3600, "h", "hours"},     {43200, 3600, "h", "hours"},    {86400, 86400, "d", "days"},
      {172800, 86400, "d", "days"},    {432000, 86400, "d", "days"},   {604800, 86400, "d", "days"},
      {1209600, 86400, "d", "days"},   {2592000, 86400, "d", "days"},  {5184000, 86400, "d", "days"},
      {15552000, 86400, "d", "days"},  {31536000, 86400, "d", "days"},
  }};
  for (const TimeStep& s : kSteps) {
    if (span / s.seconds <= 8) return s;
  }
  return kSteps.back();
}

std::string YLabel(const Panel& p, double v) {
  if (p.percent) return Num(v * 100, 0) + "%";
  return Num(v, p.ystep >= 1 ? 0 : (p.ystep >= 0.1 ? 1 : 2));
}

/// Frame, title, horizontal grid with y labels, and time ticks with labels.
void Axes(std::ostream& out, const Panel& p, const PlotSeries& s, const std::string& title) {
  out << "<g class=\"panel\">\n<text x=\"" << Num(p.x) << "\" y=\"" << Num(p.y - 8)
      << "\" font-size=\"13\" font-weight=\"bold\">" << Escape(title) << "</text>\n";
  for (double v = 0; v <= p.ymax * (1 + 1e-9); v += p.ystep) {
    const std::string y = Num(p.Y(v));
    out << "<line x1=\"" << Num(p.x) << "\" y1=\"" << y << "\" x2=\"" << Num(p.x + p.w)
        << "\" y2=\"" << y << "\" stroke=\"#e0e0e0\"/>\n<text x=\"" << Num(p.x - 6) << "\" y=\""
        << Num(p.Y(v) + 4) << "\" text-anchor=\"end\">" << YLabel(p, v) << "</text>\n";
  }
  const TimeStep step = ChooseTimeStep(s.end - s.start);
  for (Timestamp t = s.start; t <= s.end; t += step.seconds) {
    const std::string x = Num(p.X(s, static_cast<double>(t)));
    out << "<line x1=\"" << x << "\" y1=\"" << Num(p.y + p.h) << "\" x2=\"" << x << "\" y2=\""
        << Num(p.y + p.h + 5) << "\" stroke=\"#333\"/>\n<text x=\"" << x << "\" y=\""
        << Num(p.y + p.h + 17) << "\" text-anchor=\"middle\">" << (t - s.start) / step.unit
        << step.suffix << "</text>\n";
  }
  out << "<rect x=\"" << Num(p.x) << "\" y=\"" << Num(p.y) << "\" width=\"" << Num(p.w)
      << "\" height=\"" << Num(p.h) << "\" fill=\"none\" stroke=\"#333\"/>\n</g>\n";
}

/// Bucket i's value at the middle of the bucket.
double BucketMid(const PlotSeries& s, size_t i) {
  const double mid = static_cast<double>(s.start) +
                     (static_cast<double>(i) + 0.5) * static_cast<double>(s.bucket_s);
  return std::min(mid, static_cast<double>(s.end));
}

void Line(std::ostream& out, const Panel& p, const PlotSeries& s, const std::vector<double>& v,
          const std::string& id, const std::string& style) {
  out << "<polyline id=\"" << id << "\" fill=\"none\" " << style << " points=\"";
  for (size_t i = 0; i < v.size(); ++i) {
    out << (i ? " " : "") << Num(p.X(s, BucketMid(s, i))) << "," << Num(p.Y(v[i]));
  }
  out << "\"/>\n";
}

/// A filled band between `lower` and `upper` (one closed polyline).
void Band(std::ostream& out, const Panel& p, const PlotSeries& s, const std::vector<double>& lower,
          const std::vector<double>& upper, const std::string& id, const std::string& color) {
  out << "<polyline id=\"" << id << "\" fill=\"" << color << "\" fill-opacity=\"0.85\" stroke=\""
      << color << "\" stroke-width=\"0.5\" points=\"";
  for (size_t i = 0; i < upper.size(); ++i) {
    out << (i ? " " : "") << Num(p.X(s, BucketMid(s, i))) << "," << Num(p.Y(upper[i]));
  }
  for (size_t i = lower.size(); i-- > 0;) {
    out << " " << Num(p.X(s, BucketMid(s, i))) << "," << Num(p.Y(lower[i]));
  }
  out << "\"/>\n";
}

/// Legend entries (label, color, dashed) right of the panel.
void Legend(std::ostream& out, const Panel& p,
            const std::vector<std::tuple<std::string, std::string, bool>>& entries) {
  double y = p.y + 10;
  out << "<g class=\"legend\">\n";
  for (const auto& [label, color, dashed] : entries) {
    const double x = p.x + p.w + 14;
    out << "<line x1=\"" << Num(x) << "\" y1=\"" << Num(y) << "\" x2=\"" << Num(x + 22)
        << "\" y2=\"" << Num(y) << "\" stroke=\"" << color << "\" stroke-width=\"3\""
        << (dashed ? " stroke-dasharray=\"5,3\"" : "") << "/>\n<text x=\"" << Num(x + 28)
        << "\" y=\"" << Num(y + 4) << "\">" << Escape(label) << "</text>\n";
    y += 16;
  }
  out << "</g>\n";
}

Panel MakePanel(int row, double ymax_data, bool percent) {
  Panel p;
  p.x = kLeft;
  p.y = kTop + row * (kPanelH + kGap);
  p.w = kWidth - kLeft - kRight;
  p.h = kPanelH;
  p.percent = percent;
  if (percent) {
    p.ymax = 1;
    p.ystep = 0.25;
  } else {
    std::tie(p.ymax, p.ystep) = NiceAxis(ymax_data);
  }
  return p;
}

void QueuePanel(std::ostream& out, const PlotSeries& s) {
  const double top = s.pending.empty() ? 0 : *std::max_element(s.pending.begin(), s.pending.end());
  const Panel p = MakePanel(0, top, false);
  Axes(out, p, s, "Queue length (pending jobs)");
  Line(out, p, s, s.pending, "queue", "stroke=\"" + std::string(kColors[0]) + "\" stroke-width=\"1.5\"");
  Legend(out, p, {{"pending jobs", kColors[0], false}});
}

void BusyPanel(std::ostream& out, const PlotSeries& s) {
  const std::string unit = s.resource == "gpu" ? "GPUs" : "CPUs";
  const Panel p = MakePanel(1, static_cast<double>(s.capacity), false);
  Axes(out, p, s, "Resources held (" + unit + ")");
  const double cap = p.Y(static_cast<double>(s.capacity));
  out << "<polyline id=\"capacity\" fill=\"none\" stroke=\"#333\" stroke-dasharray=\"5,3\" "
      << "points=\"" << Num(p.x) << "," << Num(cap) << " " << Num(p.x + p.w) << "," << Num(cap)
      << "\"/>\n";
  Line(out, p, s, s.busy, "busy", "stroke=\"" + std::string(kColors[1]) + "\" stroke-width=\"1.5\"");
  Legend(out, p, {{"busy " + unit, kColors[1], false},
                  {"total (" + std::to_string(s.capacity) + ")", "#333", true}});
}

void UtilizationPanel(std::ostream& out, const PlotSeries& s) {
  const Panel p = MakePanel(2, 1, true);
  Axes(out, p, s, "Utilization");
  Line(out, p, s, s.utilization, "utilization",
       "stroke=\"" + std::string(kColors[2]) + "\" stroke-width=\"1\"");
  Line(out, p, s, s.cumulative_utilization, "cumulative-utilization",
       "stroke=\"" + std::string(kColors[4]) + "\" stroke-width=\"2.5\"");
  Legend(out, p, {{"per interval", kColors[2], false}, {"cumulative", kColors[4], false}});
}

void AccountPanel(std::ostream& out, const PlotSeries& s) {
  const Panel p = MakePanel(3, 1, true);
  Axes(out, p, s, "Usage share by account (of resources held)");
  std::vector<double> lower(s.pending.size(), 0.0);
  std::vector<std::tuple<std::string, std::string, bool>> legend;
  for (size_t a = 0; a < s.account_share.size(); ++a) {
    std::vector<double> upper = lower;
    for (size_t i = 0; i < upper.size(); ++i) upper[i] += s.account_share[a][i];
    const bool other = a + 1 == s.accounts.size() && s.accounts[a] == "other";
    const std::string color = other ? "#c7c7c7" : kColors[a % (kColors.size() - 1)];
    Band(out, p, s, lower, upper, "account-" + std::to_string(a), color);
    legend.emplace_back(s.accounts[a], color, false);
    lower = std::move(upper);
  }
  Legend(out, p, legend);
}

/// x position of a wait on the log axis of WriteSvgWaitCdf ([1 s, 10^decades s] -> [x, x + w]).
double LogX(const Panel& p, double decades, double wait_s) {
  return p.x + p.w * std::log10(std::max(wait_s, 1.0)) / decades;
}

void WaitAxes(std::ostream& out, const Panel& p, double decades) {
  static constexpr std::array<std::pair<double, const char*>, 9> kTicks = {{
      {1, "1 s"}, {10, "10 s"}, {60, "1 min"}, {600, "10 min"}, {3600, "1 h"}, {36000, "10 h"},
      {86400, "1 d"}, {864000, "10 d"}, {8640000, "100 d"}}};
  for (double v = 0; v <= 1 + 1e-9; v += 0.25) {
    out << "<line x1=\"" << Num(p.x) << "\" y1=\"" << Num(p.Y(v)) << "\" x2=\"" << Num(p.x + p.w)
        << "\" y2=\"" << Num(p.Y(v)) << "\" stroke=\"#e0e0e0\"/>\n<text x=\"" << Num(p.x - 6)
        << "\" y=\"" << Num(p.Y(v) + 4) << "\" text-anchor=\"end\">" << Num(v * 100, 0)
        << "%</text>\n";
  }
  for (const auto& [seconds, label] : kTicks) {
    if (std::log10(seconds) > decades + 1e-9) break;
    const std::string x = Num(LogX(p, decades, seconds));
    out << "<line x1=\"" << x << "\" y1=\"" << Num(p.y) << "\" x2=\"" << x << "\" y2=\""
        << Num(p.y + p.h + 5) << "\" stroke=\"#e0e0e0\"/>\n<text x=\"" << x << "\" y=\""
        << Num(p.y + p.h + 17) << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  out << "<rect x=\"" << Num(p.x) << "\" y=\"" << Num(p.y) << "\" width=\"" << Num(p.w)
      << "\" height=\"" << Num(p.h) << "\" fill=\"none\" stroke=\"#333\"/>\n";
}

}  // namespace

void WriteSvgWaitCdf(std::ostream& out, const std::vector<WaitSeries>& series,
                     const std::string& title) {
  constexpr double kHeight = 460, kPlotH = 320;
  constexpr int kPoints = 400;
  double longest = 10;
  for (const WaitSeries& s : series) {
    for (double w : s.waits_s) longest = std::max(longest, w);
  }
  const double decades = std::ceil(std::log10(longest) - 1e-9);
  Panel p;
  p.x = kLeft;
  p.y = kTop;
  p.w = kWidth - kLeft - kRight;
  p.h = kPlotH;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Num(kWidth, 0) << "\" height=\""
      << Num(kHeight, 0) << "\" viewBox=\"0 0 " << Num(kWidth, 0) << " " << Num(kHeight, 0)
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect x=\"0\" y=\"0\" width=\""
      << Num(kWidth, 0) << "\" height=\"" << Num(kHeight, 0) << "\" fill=\"white\"/>\n<text x=\""
      << Num(kLeft) << "\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << Escape(title)
      << "</text>\n<text x=\"" << Num(kLeft) << "\" y=\"38\" fill=\"#555\">share of finished "
      << "jobs that waited at most x (wait = first start - submit, log scale)</text>\n";
  WaitAxes(out, p, decades);
  std::vector<std::tuple<std::string, std::string, bool>> legend;
  for (size_t i = 0; i < series.size(); ++i) {
    std::vector<double> waits = series[i].waits_s;
    std::sort(waits.begin(), waits.end());
    const auto n = static_cast<double>(std::max<size_t>(waits.size(), 1));
    const std::string color = kColors[i % kColors.size()];
    out << "<polyline id=\"policy-" << i << "\" fill=\"none\" stroke=\"" << color
        << "\" stroke-width=\"2\" points=\"";
    for (int k = 0; k <= kPoints; ++k) {
      const double x = std::pow(10.0, decades * k / kPoints);
      const auto at_most = std::upper_bound(waits.begin(), waits.end(), x) - waits.begin();
      out << (k ? " " : "") << Num(LogX(p, decades, x)) << ","
          << Num(p.Y(static_cast<double>(at_most) / n));
    }
    out << "\"/>\n";
    legend.emplace_back(series[i].label, color, false);
  }
  Legend(out, p, legend);
  out << "</svg>\n";
}

PlotSeries BuildPlotSeries(const SimResult& result, int max_buckets, int top_accounts) {
  PlotSeries s;
  s.resource = result.resource;
  s.capacity = result.capacity;
  for (const JobOutcome& j : result.jobs) {
    if (!j.infeasible.empty()) continue;
    s.end = std::max(s.end, j.submit);
    for (const RunSpan& r : j.runs) s.end = std::max(s.end, r.end);
  }
  const Duration span = s.end - s.start;
  const int64_t want = std::clamp<int64_t>(max_buckets, 1, span);
  s.bucket_s = (span + want - 1) / want;
  const auto n = static_cast<size_t>((span + s.bucket_s - 1) / s.bucket_s);
  const std::map<std::string, size_t> index = RankAccounts(result, top_accounts, s.accounts);
  std::vector<double> pending(n, 0.0), held(n, 0.0);
  std::vector<std::vector<double>> by_account(s.accounts.size(), std::vector<double>(n, 0.0));
  for (const JobOutcome& j : result.jobs) {
    if (!j.infeasible.empty()) continue;
    Timestamp from = j.submit;  // pending since
    for (const RunSpan& r : j.runs) {
      AddInterval(pending, s.start, s.bucket_s, from, r.start, 1);
      AddInterval(held, s.start, s.bucket_s, r.start, r.end, static_cast<double>(j.size));
      AddInterval(by_account[index.at(j.account)], s.start, s.bucket_s, r.start, r.end,
                  static_cast<double>(j.size));
      from = r.end;
    }
    if (j.end < 0) AddInterval(pending, s.start, s.bucket_s, from, s.end, 1);
  }
  const double capacity = static_cast<double>(std::max<int64_t>(s.capacity, 1));
  double total = 0;
  s.account_share.assign(s.accounts.size(), std::vector<double>(n, 0.0));
  for (size_t b = 0; b < n; ++b) {
    const Timestamp b0 = s.start + static_cast<Timestamp>(b) * s.bucket_s;
    const auto len = static_cast<double>(std::min(s.bucket_s, s.end - b0));
    total += held[b];
    s.pending.push_back(pending[b] / len);
    s.busy.push_back(held[b] / len);
    s.utilization.push_back(held[b] / len / capacity);
    s.cumulative_utilization.push_back(
        total / (capacity * static_cast<double>(b0 - s.start + static_cast<Timestamp>(len))));
    for (size_t a = 0; a < by_account.size(); ++a) {
      if (held[b] > 0) s.account_share[a][b] = by_account[a][b] / held[b];
    }
  }
  return s;
}

void WriteSvgPlot(std::ostream& out, const PlotSeries& s, const std::string& title) {
  const double height = kTop + 4 * (kPanelH + kGap) - 10;
  const TimeStep step = ChooseTimeStep(s.end - s.start);
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << Num(kWidth, 0) << "\" height=\""
      << Num(height, 0) << "\" viewBox=\"0 0 " << Num(kWidth, 0) << " " << Num(height, 0)
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << Num(kWidth, 0) << "\" height=\"" << Num(height, 0)
      << "\" fill=\"white\"/>\n<text x=\"" << Num(kLeft) << "\" y=\"22\" font-size=\"15\" "
      << "font-weight=\"bold\">" << Escape(title) << "</text>\n<text x=\"" << Num(kLeft)
      << "\" y=\"38\" fill=\"#555\">time since the first submission (" << step.name
      << "); each point averages " << s.bucket_s << " s</text>\n";
  QueuePanel(out, s);
  BusyPanel(out, s);
  UtilizationPanel(out, s);
  AccountPanel(out, s);
  out << "</svg>\n";
}

}  // namespace mlsched::sim
