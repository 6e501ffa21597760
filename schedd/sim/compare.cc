#include "schedd/sim/compare.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "schedd/sim/plot.h"

namespace mlsched::sim {
namespace {

double Round6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return std::strtod(buf, nullptr);
}

std::string ShortName(const std::string& path) {
  std::filesystem::path p(path);
  return p.extension() == ".toml" ? p.stem().string() : p.filename().string();
}

}  // namespace

std::vector<std::string> SplitPolicyList(const std::string& list) {
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const size_t comma = list.find(',', from);
    const std::string item = list.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
    if (item.empty()) {
      throw std::invalid_argument("--compare '" + list + "': empty policy file name at position " +
                                  std::to_string(out.size() + 1));
    }
    out.push_back(item);
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (out.size() < 2) {
    throw std::invalid_argument("--compare '" + list + "': give at least two policy files, "
                                "separated by commas");
  }
  return out;
}

std::vector<CompareRow> RunCompare(const SimConfig& base, const std::vector<std::string>& policies) {
  std::vector<CompareRow> rows;
  for (const std::string& policy : policies) {
    SimConfig config = base;
    config.policy_path = policy;
    Replay r;
    try {
      r = RunReplay(config);
    } catch (const std::exception& e) {
      throw std::runtime_error("--compare, policy " + policy + ": " + e.what());
    }
    CompareRow row;
    row.name = ShortName(policy);
    row.path = policy;
    row.description = r.info.policy;
    row.metrics = r.metrics;
    for (const JobOutcome& j : r.result.jobs) {
      if (j.end >= 0) row.waits_s.push_back(static_cast<double>(j.first_start - j.submit));
    }
    std::sort(row.waits_s.begin(), row.waits_s.end());
    rows.push_back(std::move(row));
  }
  return rows;
}

void WriteCompareTable(std::ostream& out, const std::string& trace,
                       const std::vector<CompareRow>& rows) {
  size_t width = 6;
  for (const CompareRow& r : rows) width = std::max(width, r.name.size());
  const int w = static_cast<int>(width);
  char buf[400];
  out << "trace " << trace << ": " << rows.size() << " policies\n";
  std::snprintf(buf, sizeof buf, "%-*s %13s %13s %13s %10s %11s %7s %7s %9s\n", w, "policy",
                "mean wait(s)", "p95 wait(s)", "max wait(s)", "mean bsld", "max bsld", "util",
                "Jain", "finished");
  out << buf;
  for (const CompareRow& r : rows) {
    const Metrics& m = r.metrics;
    std::snprintf(buf, sizeof buf, "%-*s %13.1f %13.1f %13.1f %10.2f %11.2f %7.4f %7.4f %9lld\n", w,
                  r.name.c_str(), m.mean_wait_s, m.p95_wait_s, m.max_wait_s,
                  m.mean_bounded_slowdown, m.max_bounded_slowdown, m.utilization,
                  m.jain_fairness, static_cast<long long>(m.finished));
    out << buf;
  }
  out << "\n";
  for (const CompareRow& r : rows) out << r.name << ": " << r.path << " (" << r.description << ")\n";
}

void WriteCompareJson(std::ostream& out, const std::string& trace,
                      const std::vector<CompareRow>& rows) {
  nlohmann::ordered_json j;
  j["trace"] = trace;
  auto& list = j["policies"] = nlohmann::ordered_json::array();
  for (const CompareRow& r : rows) {
    const Metrics& m = r.metrics;
    list.push_back({{"name", r.name},
                    {"path", r.path},
                    {"policy", r.description},
                    {"jobs", m.jobs},
                    {"finished", m.finished},
                    {"mean_wait_s", Round6(m.mean_wait_s)},
                    {"p95_wait_s", Round6(m.p95_wait_s)},
                    {"max_wait_s", Round6(m.max_wait_s)},
                    {"mean_bounded_slowdown", Round6(m.mean_bounded_slowdown)},
                    {"max_bounded_slowdown", Round6(m.max_bounded_slowdown)},
                    {"utilization", Round6(m.utilization)},
                    {"jain_fairness", Round6(m.jain_fairness)}});
  }
  out << j.dump(2) << "\n";
}

void WriteCompareSvg(std::ostream& out, const std::string& title,
                     const std::vector<CompareRow>& rows) {
  std::vector<WaitSeries> series;
  for (const CompareRow& r : rows) series.push_back(WaitSeries{r.name, r.waits_s});
  WriteSvgWaitCdf(out, series, title);
}

}  // namespace mlsched::sim
