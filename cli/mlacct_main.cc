// mlacct: job accounting (like sacct), and one job's efficiency (like seff, --efficiency JOB).
#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/acct_format.h"
#include "cli/exit_codes.h"
#include "cli/json_text.h"
#include "cli/paging.h"
#include "cli/requests.h"
#include "cli/rpc.h"
#include "cli/job_states.h"
#include "common/units.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

struct AcctArgs {
  JobFilters filters;
  std::vector<std::string> accounts;
  std::string format = kDefaultAcctFields, end, server, efficiency;
  bool all_users = false, parsable2 = false, noheader = false, json = false;
  int64_t max_jobs = kDefaultMaxListJobs;
};

void AddOptions(CLI::App& app, AcctArgs& a) {
  app.set_help_flag("--help", "print this help");
  app.add_option("-u,--user", a.filters.users, "only jobs of these users (comma list; default: yours)")->delimiter(',');
  app.add_flag("-a,--allusers", a.all_users, "jobs of every user (operators see every job's details; others see their own)");
  app.add_option("-j,--jobs", a.filters.job_ids, "only these job ids (comma list)")->delimiter(',');
  app.add_option("-s,--state", a.filters.states, "only jobs in these states: names or codes PD R CD F CA TO PR NF, or all");
  app.add_option("-r,--partition", a.filters.partitions, "only jobs of these partitions (comma list)")->delimiter(',');
  app.add_option("-A,--account", a.accounts, "only jobs of these accounts (comma list)")->delimiter(',');
  app.add_option("-S,--starttime", a.filters.since,
                 "jobs running or ended at or after TIME (default: today 00:00): now-2d, -36h, YYYY-MM-DD[THH:MM[:SS]], @UNIX");
  app.add_option("-E,--endtime", a.end, "jobs submitted before TIME (same forms as -S; default: now)");
  app.add_option("-o,--format", a.format, std::string("fields, comma list (default ") + kDefaultAcctFields + "; --helpformat)");
  app.add_flag("-P,--parsable2", a.parsable2, "fields separated by '|', not padded");
  app.add_flag("-n,--noheader", a.noheader, "no header lines");
  app.add_flag("--json", a.json, "a JSON array of one object per job, the --format fields as keys");
  app.add_option("--max-jobs", a.max_jobs, "print at most N jobs")->check(CLI::Range(int64_t{1}, kMaxListJobs));
  auto* eff = app.add_option("--efficiency", a.efficiency, "one job's CPU, memory and GPU efficiency and a verdict (like seff)");
  for (const char* o : {"--user", "--allusers", "--jobs", "--state", "--partition", "--account", "--starttime", "--endtime",
                        "--format", "--parsable2", "--noheader", "--max-jobs"})
    eff->excludes(app.get_option(o));
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,... (default: $MLSCHED_SERVER)");
  app.footer("Fields: CPU time and MaxRSS come from the tasks' cgroups, GPU figures from NVML on the nodes (agentd),\n"
             "summed over the job's attempts. " + ExitCodesHelp());
}

// Midnight today, local time (sacct's default -S).
int64_t TodayMidnight(int64_t now) {
  std::time_t t = static_cast<std::time_t>(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
  return static_cast<int64_t>(std::mktime(&tm));
}

std::string MyUserName() {
  if (const passwd* pw = getpwuid(geteuid())) return pw->pw_name;
  return std::to_string(geteuid());
}

int Efficiency(const AcctArgs& a) {
  auto id = ParseJobId(a.efficiency);
  if (!id) {
    std::cerr << "mlacct: --efficiency: " << id.error << "\n";
    return kExitUsage;
  }
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlacct: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  v1::JobInfo job;
  if (RpcStatus st = client.GetJob(*id.value, &job); !st.ok()) {
    std::cerr << DescribeRpcError("mlacct", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  const int64_t now = std::time(nullptr);
  if (a.json) {
    std::vector<std::string> all = AcctFieldNames();
    std::cout << JsonText(AcctJson(all, job, now), 2) << "\n";
  } else {
    std::cout << FormatEfficiency(job, now);
  }
  return kExitOk;
}

int List(AcctArgs& a, const std::vector<std::string>& fields) {
  const int64_t now = std::time(nullptr);
  if (a.filters.users.empty() && !a.all_users && a.filters.job_ids.empty()) a.filters.users = {MyUserName()};
  if (a.filters.since.empty()) a.filters.since = "@" + std::to_string(TodayMidnight(now));
  if (a.filters.states.empty()) a.filters.states = "all";
  int64_t end = now;
  if (!a.end.empty()) {
    auto e = ParseTimePoint(a.end, now);
    if (!e) {
      std::cerr << "mlacct: --endtime: " << e.error << "\n";
      return kExitUsage;
    }
    end = *e.value;
  }
  auto req = BuildListRequest(a.filters, now);
  if (!req) {
    std::cerr << "mlacct: " << req.error << "\n";
    return kExitUsage;
  }
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlacct: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  RpcStatus st;
  ListOutcome listed;
  auto fetch = [&](const v1::ListJobsRequest& r, v1::ListJobsResponse* resp) { return (st = client.ListJobs(r, resp)).ok(); };
  if (!ListJobPages(*req.value, a.max_jobs, fetch, &listed)) {
    std::cerr << DescribeRpcError("mlacct", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  const int64_t since = req.value->finished_since();
  std::vector<const v1::JobInfo*> jobs;
  for (const auto& j : listed.jobs.jobs()) {
    if (j.submit_time() > end) continue;
    if (j.end_time() > 0 && since > 0 && j.end_time() < since) continue;
    if (!a.accounts.empty() && std::find(a.accounts.begin(), a.accounts.end(), j.spec().account()) == a.accounts.end()) continue;
    jobs.push_back(&j);
  }
  std::sort(jobs.begin(), jobs.end(), [](auto* x, auto* y) { return x->job_id() < y->job_id(); });
  std::string out;
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto* j : jobs) arr.push_back(AcctJson(fields, *j, now));
    out = JsonText(arr, 2) + "\n";
  } else {
    out = FormatAcctTable(fields, jobs, now, a.parsable2, a.noheader);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (listed.capped) std::cerr << "mlacct: showing the first " << a.max_jobs << " jobs (--max-jobs); narrow with -u, -s, -S or -j\n";
  if (!listed.error.empty()) std::cerr << "mlacct: " << listed.error << "; the list above is incomplete\n";
  return listed.error.empty() ? kExitOk : kExitRefused;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlacct: job accounting (like sacct), and one job's efficiency (like seff)", "mlacct"};
  AcctArgs a;
  AddOptions(app, a);
  bool helpformat = false;
  app.add_flag("--helpformat", helpformat, "list the field names --format takes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mlacct: " << e.what() << "\nTry 'mlacct --help'.\n";
    return kExitUsage;
  }
  if (helpformat) {
    for (const auto& f : AcctFieldNames()) std::cout << f << "\n";
    return kExitOk;
  }
  if (!a.efficiency.empty()) ExitNow(Efficiency(a));
  auto fields = ParseAcctFields(a.format);
  if (!fields) {
    std::cerr << "mlacct: --format: " << fields.error << "\n";
    return kExitUsage;
  }
  ExitNow(List(a, *fields.value));
}
