// mlreport: accounting reports for cron (like Slurm's sreport). Reads schedd's SQLite state
// read-only, which is safe beside a running schedd (WAL).
// Exit codes: 0 report printed; 1 the state or policy could not be read; 2 usage error.
#include <CLI/CLI.hpp>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>
#include <iostream>

#include "schedd/report/report.h"
#include "schedd/server/etcd_flags.h"
#include "schedd/server/etcd_store.h"

namespace {

// "now", "YYYY-MM-DD", "YYYY-MM-DDTHH:MM[:SS]" (local time), "-Nd"/"-Nh" (relative to now),
// or seconds since the epoch prefixed with '@'.
bool ParseWhen(const std::string& s, int64_t now, int64_t* out) {
  if (s == "now") return *out = now, true;
  if (s.size() > 2 && s[0] == '-') {
    char unit = s.back();
    int64_t n = std::atoll(s.substr(1, s.size() - 2).c_str());
    int64_t mult = unit == 'd' ? 86400 : unit == 'h' ? 3600 : unit == 'm' ? 60 : 0;
    if (mult == 0 || n <= 0) return false;
    return *out = now - n * mult, true;
  }
  if (!s.empty() && s[0] == '@') return *out = std::atoll(s.c_str() + 1), true;
  for (const char* fmt : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    const char* end = strptime(s.c_str(), fmt, &tm);
    if (end && *end == '\0') {
      tm.tm_isdst = -1;
      *out = static_cast<int64_t>(std::mktime(&tm));
      return true;
    }
  }
  return false;
}

/// HA mode: adds the finished jobs and attempts a replica archived out of etcd
/// (schedd/server/etcd_archive.h) from its SQLite `history`; a record in both places counts once.
void MergeArchivedHistory(mlsched::server::SqliteStore& history, int64_t start, int64_t end,
                          std::vector<mlsched::server::JobRow>* jobs, std::vector<mlsched::server::AttemptRow>* attempts) {
  std::set<int64_t> job_ids;
  for (const auto& j : *jobs) job_ids.insert(j.id);
  for (auto& j : history.LoadJobs(0))
    if (job_ids.insert(j.id).second) jobs->push_back(std::move(j));
  std::set<std::pair<int64_t, int32_t>> attempt_ids;
  for (const auto& a : *attempts) attempt_ids.insert({a.job_id, a.attempt});
  for (auto& a : history.LoadAttempts(start, end))
    if (attempt_ids.insert({a.job_id, a.attempt}).second) attempts->push_back(std::move(a));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlreport: usage, cost, waits and lost work per account and user over a period.\n"
               "Exit codes: 0 ok, 1 state/policy unreadable, 2 usage error."};
  std::string state_dir = "/var/lib/mlsched", start_s = "-1d", end_s = "now", policy;
  bool csv = false, json = false;
  std::string format;
  size_t top = 10;
  app.add_option("--state-dir", state_dir, "schedd's state directory (state.db is read, never written)");
  std::string ha, ha_prefix = "/mlsched/";
  app.add_option("--ha", ha, "Read the records from HA mode's etcd (etcd://HOST:PORT,...; read only), plus the history "
                 "a replica archived into --state-dir when its state.db exists");
  app.add_option("--ha-prefix", ha_prefix, "etcd key prefix of the cluster (schedd --ha-prefix)");
  mlsched::server::EtcdFlags etcd_flags;
  mlsched::server::AddEtcdFlags(app, &etcd_flags);
  app.add_option("-S,--start", start_s, "Period start: YYYY-MM-DD[THH:MM[:SS]], now, -Nd/-Nh/-Nm, @EPOCH");
  app.add_option("-E,--end", end_s, "Period end (exclusive), same forms");
  app.add_option("--policy", policy, "Policy file with [pricing.POOL] tables (default /etc/mlsched/policy.toml if present)");
  app.add_flag("--csv", csv, "CSV with stable columns");
  app.add_flag("--json", json, "JSON");
  app.add_option("--format", format, "text (the default), csv or json (as --csv, --json)")
      ->check(CLI::IsMember({"text", "csv", "json"}));
  app.add_option("--top", top, "Users listed in the top idle GPU-hours (the top wasters)")->check(CLI::Range(0, 10000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (std::string err = ha.empty() ? "" : mlsched::server::CheckEtcdFlags(etcd_flags); !err.empty()) {
    std::cerr << "mlreport: --ha: " << err << "\n";
    return 2;
  }
  if (int(csv) + int(json) + int(!format.empty()) > 1) {
    std::cerr << "mlreport: --csv, --json and --format are exclusive\n";
    return 2;
  }
  csv |= format == "csv";
  json |= format == "json";
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  int64_t start = 0, end = 0;
  if (!ParseWhen(start_s, now, &start)) {
    std::cerr << "mlreport: bad --start '" << start_s << "'\n";
    return 2;
  }
  if (!ParseWhen(end_s, now, &end)) {
    std::cerr << "mlreport: bad --end '" << end_s << "'\n";
    return 2;
  }
  if (end <= start) {
    std::cerr << "mlreport: --end must be after --start\n";
    return 2;
  }
  if (policy.empty() && std::filesystem::exists("/etc/mlsched/policy.toml")) policy = "/etc/mlsched/policy.toml";
  mlsched::report::Pricing pricing;
  if (!policy.empty()) {
    std::string err;
    auto p = mlsched::report::LoadPricing(policy, &err);
    if (!p) {
      std::cerr << "mlreport: " << err << "\n";
      return 1;
    }
    pricing = *p;
  }
  try {
    // Reads only: the etcd store never becomes the leader here, so it can write nothing.
    std::unique_ptr<mlsched::server::EtcdClient> etcd;
    std::unique_ptr<mlsched::server::Store> store;
    if (ha.empty()) {
      store = mlsched::server::SqliteStore::OpenReadOnly(state_dir);
    } else {
      etcd = std::make_unique<mlsched::server::EtcdClient>(mlsched::server::ParseEtcdEndpoints(ha),
                                                           std::chrono::milliseconds(5000), etcd_flags.security);
      store = std::make_unique<mlsched::server::EtcdStore>(*etcd, ha_prefix);
    }
    auto attempts = store->LoadAttempts(start, end);
    auto jobs = store->LoadJobs(0);  // every job's spec: live ones and finished ones alike
    if (!ha.empty() && std::filesystem::exists(std::filesystem::path(state_dir) / "state.db"))
      MergeArchivedHistory(*mlsched::server::SqliteStore::OpenReadOnly(state_dir), start, end, &jobs, &attempts);
    auto r = mlsched::report::Build(jobs, attempts, pricing, start, end, now, top);
    std::cout << (json ? FormatJson(r) : csv ? FormatCsv(r) : FormatTable(r));
  } catch (const std::exception& e) {
    std::cerr << "mlreport: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
