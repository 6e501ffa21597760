// mlq: list jobs (like squeue).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/exit_codes.h"
#include "cli/explain_format.h"
#include "cli/job_format.h"
#include "cli/job_states.h"
#include "cli/json_text.h"
#include "cli/requests.h"
#include "cli/rpc.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

struct MlqArgs {
  JobFilters filters;
  std::string format = kDefaultJobFormat, server, explain;
  bool noheader = false, json = false, start = false;
};

void AddOptions(CLI::App& app, MlqArgs& a) {
  app.set_help_flag("--help", "print this help");
  app.add_option("-u,--user", a.filters.users, "only jobs of these users (comma list)")->delimiter(',');
  app.add_option("-j,--jobs", a.filters.job_ids, "only these job ids (comma list); finds finished jobs too")->delimiter(',');
  app.add_option("-t,--states", a.filters.states,
                 "only jobs in these states: names or codes PD R CG CD F CA TO PR NF, or all");
  app.add_option("-p,--partition", a.filters.partitions, "only jobs of these partitions (comma list)")->delimiter(',');
  app.add_option("-o,--format", a.format, "columns as % codes, e.g. '%.10i %20j %T %R' (see cli/README.md)");
  app.add_flag("-h,--noheader", a.noheader, "do not print the header line");
  app.add_flag("--json", a.json, "print a JSON array of job objects");
  app.add_flag("--all", a.filters.all, "also jobs that finished long ago");
  auto* start = app.add_flag("--start", a.start,
                             "pending jobs with their expected start time (N/A = unknown) and reason, earliest first");
  auto* explain = app.add_option("--explain", a.explain,
                                 "why a job waits: its reason, expected start and priority factors (like sprio)");
  explain->excludes(start);
  for (const char* o : {"--user", "--jobs", "--states", "--partition", "--format", "--all"})
    explain->excludes(app.get_option(o));
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas; default: $MLSCHED_SERVER)");
  app.footer("Shows pending, running and recently finished jobs by default.\n\n" + ExitCodesHelp());
}

// mlq --explain JOB: one job's reason, expected start and priority breakdown.
int Explain(const MlqArgs& a) {
  auto id = ParseJobId(a.explain);
  if (!id) {
    std::cerr << "mlq: --explain: " << id.error << "\n";
    return kExitUsage;
  }
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlq: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  v1::ExplainJobResponse resp;
  if (RpcStatus st = client.ExplainJob(*id.value, &resp); !st.ok()) {
    std::cerr << DescribeRpcError("mlq", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  if (a.json) std::cout << JsonText(ExplainJson(resp), 2) << "\n";
  else std::cout << FormatExplain(resp);
  ExitNow(kExitOk);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlq: list jobs (like squeue)", "mlq"};
  MlqArgs a;
  AddOptions(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mlq: " << e.what() << "\nTry 'mlq --help'.\n";
    return kExitUsage;
  }
  if (!a.explain.empty()) return Explain(a);
  if (a.start) {
    if (a.filters.states.empty()) a.filters.states = "PD";
    if (app.count("--format") == 0) a.format = kStartJobFormat;
  }
  auto req = BuildListRequest(a.filters);
  if (!req) {
    std::cerr << "mlq: " << req.error << "\n";
    return kExitUsage;
  }
  auto format = ParseJobFormat(a.format);
  if (!format) {
    std::cerr << "mlq: --format: " << format.error << "\n";
    return kExitUsage;
  }
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlq: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  v1::ListJobsResponse resp;
  if (RpcStatus st = client.ListJobs(*req.value, &resp); !st.ok()) {
    std::cerr << DescribeRpcError("mlq", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  std::vector<const v1::JobInfo*> jobs;
  for (const auto& j : resp.jobs()) jobs.push_back(&j);
  if (a.start) std::sort(jobs.begin(), jobs.end(), [](auto* x, auto* y) { return StartOrderLess(*x, *y); });
  else std::sort(jobs.begin(), jobs.end(), [](auto* x, auto* y) { return x->job_id() < y->job_id(); });
  const int64_t now = std::time(nullptr);
  if (a.json) {
    const std::string out = FormatJobsJson(jobs, now);
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    std::string out;
    out.reserve(jobs.size() * 96 + 128);
    if (!a.noheader) out += FormatJobHeader(*format.value) + "\n";
    for (const auto* j : jobs) AppendJobLine(out, *format.value, *j, now);
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  auto unknown = UnknownJobIds(*req.value, resp);
  for (int64_t id : unknown) std::cerr << "mlq: job " << id << ": no such job\n";
  ExitNow(unknown.empty() ? kExitOk : kExitRefused);
}
