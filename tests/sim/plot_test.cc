// mlsim --plot: the series derived from per-job attempts, and the SVG (well-formed, one polyline
// per series, byte-identical across runs).
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <vector>

#include "schedd/sim/metrics.h"
#include "schedd/sim/plot.h"
#include "schedd/sim/simulator.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::CpuJob;

namespace {

// 4 processors, FIFO: J1 (account a, 4 cpus) runs [0, 100); J2 ("r&d", 2 cpus, submitted at 10)
// runs [100, 150); J3 (a, 2 cpus, submitted at 20) runs [100, 200).
SimResult SmallRun() {
  Trace t;
  t.name = "small";
  t.format = "swf";
  t.jobs = {CpuJob(1, 0, 100, 4, 0, "a"), CpuJob(2, 10, 50, 2, 0, "r&d"),
            CpuJob(3, 20, 100, 2, 0, "a")};
  FinalizeTrace(t);
  return Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"), {});
}

std::string Svg(const SimResult& r) {
  std::ostringstream out;
  WriteSvgPlot(out, BuildPlotSeries(r), "small <trace> & FIFO");
  return out.str();
}

/// Tags nest and close, attribute quotes pair up, and there is exactly one root element.
bool WellFormed(const std::string& s, std::string& why) {
  std::vector<std::string> open;
  int roots = 0;
  for (size_t i = s.find('<'); i != std::string::npos; i = s.find('<', i + 1)) {
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return why = "unterminated tag", false;
    const std::string tag = s.substr(i + 1, end - i - 1);
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return why = "quotes in <" + tag, false;
    if (tag.empty() || tag.find('<') != std::string::npos) return why = "bad tag", false;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return why = "stray </" + tag, false;
      open.pop_back();
      continue;
    }
    if (open.empty()) ++roots;
    if (tag.back() != '/') open.push_back(tag.substr(0, tag.find_first_of(" \n")));
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  if (roots != 1) return why = "roots: " + std::to_string(roots), false;
  return true;
}

/// The number of "x,y" points of the polyline with this id (0 when absent).
size_t PointsOf(const std::string& svg, const std::string& id) {
  const size_t at = svg.find("<polyline id=\"" + id + "\"");
  if (at == std::string::npos) return 0;
  const size_t p = svg.find("points=\"", at) + 8;
  const std::string pts = svg.substr(p, svg.find('"', p) - p);
  return static_cast<size_t>(std::count(pts.begin(), pts.end(), ','));
}

}  // namespace

TEST_CASE("plot series are time averages of per-job pending and running intervals",
          "[sim][plot]") {
  const PlotSeries s = BuildPlotSeries(SmallRun(), 4);
  CHECK(s.start == 0);
  CHECK(s.end == 200);
  CHECK(s.bucket_s == 50);
  CHECK(s.capacity == 4);
  CHECK(s.pending == std::vector<double>{1.4, 2.0, 0.0, 0.0});
  CHECK(s.busy == std::vector<double>{4, 4, 4, 2});
  CHECK(s.utilization == std::vector<double>{1, 1, 1, 0.5});
  CHECK(s.cumulative_utilization.back() == Approx(0.875));
  CHECK(s.cumulative_utilization.back() == Approx(ComputeMetrics(SmallRun(), {}).utilization));
  REQUIRE(s.accounts == std::vector<std::string>{"a", "r&d"});
  CHECK(s.account_share[0] == std::vector<double>{1, 1, 0.5, 1});
  CHECK(s.account_share[1] == std::vector<double>{0, 0, 0.5, 0});

  const PlotSeries top1 = BuildPlotSeries(SmallRun(), 4, 1);
  CHECK(top1.accounts == std::vector<std::string>{"a", "other"});
  CHECK(top1.account_share[1] == std::vector<double>{0, 0, 0.5, 0});
}

TEST_CASE("mlsim --plot writes a well-formed, deterministic SVG with every series",
          "[sim][plot]") {
  const std::string svg = Svg(SmallRun());
  REQUIRE(svg.rfind("<svg ", 0) == 0);
  CHECK(svg.size() >= 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  std::string why;
  const bool well_formed = WellFormed(svg, why);
  INFO(why);
  CHECK(well_formed);
  for (const char* id : {"queue", "busy", "utilization", "cumulative-utilization", "account-0",
                         "account-1"}) {
    INFO(id);
    CHECK(PointsOf(svg, id) >= 4);
  }
  CHECK(PointsOf(svg, "capacity") == 2);
  CHECK(svg.find("small &lt;trace&gt; &amp; FIFO") != std::string::npos);
  CHECK(svg.find(">r&amp;d<") != std::string::npos);  // legend, escaped
  CHECK(svg.find(">180s<") != std::string::npos);      // 30 s ticks over a 200 s run
  CHECK(Svg(SmallRun()) == svg);                       // same input, same bytes
}

TEST_CASE("plot of a long run labels the time axis in days", "[sim][plot]") {
  Trace t;
  t.name = "long";
  t.format = "swf";
  t.jobs = {CpuJob(1, 0, 6 * 86400, 2), CpuJob(2, 86400, 3600, 4)};
  FinalizeTrace(t);
  const SimResult r = Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"), {});
  const PlotSeries s = BuildPlotSeries(r);
  CHECK(s.pending.size() <= 800);
  std::ostringstream out;
  WriteSvgPlot(out, s, "long");
  CHECK(out.str().find(">6d<") != std::string::npos);  // daily ticks over 6 days
  std::string why;
  CHECK(WellFormed(out.str(), why));
}
