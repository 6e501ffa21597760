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
#include "cli/paging.h"
#include "cli/requests.h"
#include "cli/rpc.h"
#include "cli/step_format.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

struct MlqArgs {
  JobFilters filters;
  std::string format = kDefaultJobFormat, server, explain;
  bool noheader = false, json = false, start = false, steps = false;
  int64_t max_jobs = kDefaultMaxListJobs;
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
  app.add_flag("-a,--all", a.filters.all,
               "also jobs that finished long ago: those that ended in the last 7 days (see --since)");
  app.add_option("--since", a.filters.since,
                 "also finished jobs that ended at or after TIME (implies --all): now-2d, -36h, -1week, "
                 "YYYY-MM-DD[THH:MM[:SS]] (local time), @UNIX_SECONDS");
  app.add_option("--max-jobs", a.max_jobs, "print at most N jobs (default " + std::to_string(kDefaultMaxListJobs) + ")")
      ->check(CLI::Range(int64_t{1}, kMaxListJobs));
  auto* start = app.add_flag("--start", a.start,
                             "pending jobs with their expected start time (N/A = unknown) and reason, earliest first");
  app.add_flag("-s,--steps", a.steps,
               "the steps of the listed jobs (mlrun inside a job or allocation; squeue --steps): STEPID is JOB.STEP");
  auto* explain = app.add_option("--explain", a.explain,
                                 "why a job waits: its reason, expected start and priority factors (like sprio)");
  explain->excludes(start);
  for (const char* o : {"--user", "--jobs", "--states", "--partition", "--format", "--all", "--since", "--max-jobs"})
    explain->excludes(app.get_option(o));
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas; default: $MLSCHED_SERVER)");
  app.footer("Shows pending, running and recently finished jobs by default. Jobs are fetched from schedd page by\n"
             "page; a schedd that keeps sending pages is cut off after " + std::to_string(kMaxListPages) +
             " (an error, exit 1).\n\n" + ExitCodesHelp());
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

// Prints the jobs, sorted (by id, or by expected start with --start), as a table or JSON.
void PrintJobs(const MlqArgs& a, const std::vector<FormatItem>& format, const v1::ListJobsResponse& resp) {
  std::vector<const v1::JobInfo*> jobs;
  for (const auto& j : resp.jobs()) jobs.push_back(&j);
  if (a.start) std::sort(jobs.begin(), jobs.end(), [](auto* x, auto* y) { return StartOrderLess(*x, *y); });
  else std::sort(jobs.begin(), jobs.end(), [](auto* x, auto* y) { return x->job_id() < y->job_id(); });
  const int64_t now = std::time(nullptr);
  std::string out;
  if (a.json) {
    out = FormatJobsJson(jobs, now);
  } else {
    out.reserve(jobs.size() * 96 + 128);
    if (!a.noheader) out += FormatJobHeader(format) + "\n";
    for (const auto* j : jobs) AppendJobLine(out, format, *j, now);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// mlq --steps: the steps of `jobs`, asked for in requests of 100 job ids.
int PrintSteps(const MlqArgs& a, SchedClient& client, const v1::ListJobsResponse& listed) {
  const auto& jobs = listed.jobs();
  std::vector<v1::StepInfo> steps;
  for (size_t i = 0; i < static_cast<size_t>(jobs.size()); i += 100) {
    std::vector<int64_t> ids;
    for (size_t j = i; j < std::min<size_t>(static_cast<size_t>(jobs.size()), i + 100); ++j) ids.push_back(jobs[static_cast<int>(j)].job_id());
    v1::ListStepsResponse resp;
    if (RpcStatus st = client.ListSteps(ids, &resp); !st.ok()) {
      std::cerr << DescribeRpcError("mlq", st, client.Address(), 30) << "\n";
      return ExitCodeForRpc(st.code);
    }
    steps.insert(steps.end(), resp.steps().begin(), resp.steps().end());
  }
  const int64_t now = std::time(nullptr);
  std::string out;
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& s : steps) arr.push_back(StepJson(s, now));
    out = JsonText(arr, 2) + "\n";
  } else {
    out = FormatStepTable(steps, now, a.noheader);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitOk;
}

// mlq: lists the jobs page by page (cli/paging.h), prints them, then says on stderr what is
// missing: an early stop (--max-jobs; a misbehaving schedd: exit 1) and unknown -j ids (exit 1).
int ListAndPrint(const MlqArgs& a, const v1::ListJobsRequest& req, const std::vector<FormatItem>& format) {
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlq: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  RpcStatus st;
  ListOutcome listed;
  auto fetch = [&](const v1::ListJobsRequest& r, v1::ListJobsResponse* resp) { return (st = client.ListJobs(r, resp)).ok(); };
  if (!ListJobPages(req, a.max_jobs, fetch, &listed)) {
    std::cerr << DescribeRpcError("mlq", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  if (a.steps) {
    if (int code = PrintSteps(a, client, listed.jobs); code != kExitOk) return code;
  } else {
    PrintJobs(a, format, listed.jobs);
  }
  if (listed.capped)
    std::cerr << "mlq: showing the first " << a.max_jobs << " jobs (--max-jobs); narrow the listing with -u, -t, -p, -j "
              << "or --since\n";
  if (!listed.error.empty()) std::cerr << "mlq: " << listed.error << "; the list above is incomplete\n";
  auto unknown = listed.capped || !listed.error.empty() ? std::vector<int64_t>{} : UnknownJobIds(req, listed.jobs);
  for (int64_t id : unknown) std::cerr << "mlq: job " << id << ": no such job\n";
  return unknown.empty() && listed.error.empty() ? kExitOk : kExitRefused;
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
  auto req = BuildListRequest(a.filters, std::time(nullptr));
  if (!req) {
    std::cerr << "mlq: " << req.error << "\n";
    return kExitUsage;
  }
  auto format = ParseJobFormat(a.format);
  if (!format) {
    std::cerr << "mlq: --format: " << format.error << "\n";
    return kExitUsage;
  }
  ExitNow(ListAndPrint(a, *req.value, *format.value));
}
