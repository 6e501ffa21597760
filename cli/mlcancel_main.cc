// mlcancel: cancel or signal jobs (like scancel).
#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/exit_codes.h"
#include "cli/paging.h"
#include "cli/requests.h"
#include "cli/rpc.h"
#include "common/safe_text.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

struct CancelArgs {
  CancelSelection sel;
  std::string server;
};

void AddOptions(CLI::App& app, CancelArgs& a) {
  app.set_help_flag("--help", "print this help");
  app.add_option("job_ids", a.sel.job_ids, "jobs to cancel");
  app.add_option("-u,--user", a.sel.user, "jobs of this user");
  app.add_option("-t,--state", a.sel.states, "only jobs in these states (names or codes, comma list)");
  app.add_option("-s,--signal", a.sel.signal, "send this signal (TERM, USR1, KILL, ... or a number) instead of cancelling");
  app.add_option("-n,--name", a.sel.name, "only jobs with this name");
  app.add_option("-p,--partition", a.sel.partition, "only jobs of this partition");
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas; default: $MLSCHED_SERVER)");
  app.footer(
      "Selects jobs by id and/or filters. Without job ids and without -u, filters apply to your own jobs.\n"
      "Prints one error line per job that could not be cancelled.\n\n" +
      ExitCodesHelp());
}

std::string CurrentUser() {
  if (struct passwd* pw = getpwuid(getuid())) return pw->pw_name;
  return std::to_string(getuid());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlcancel: cancel or signal jobs (like scancel)", "mlcancel"};
  CancelArgs a;
  AddOptions(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mlcancel: " << e.what() << "\nTry 'mlcancel --help'.\n";
    return kExitUsage;
  }
  auto parsed = BuildCancelRequest(a.sel, CurrentUser());
  if (!parsed) {
    std::cerr << "mlcancel: " << parsed.error << "\n";
    return kExitUsage;
  }
  v1::CancelJobsRequest& req = *parsed.value;
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlcancel: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  bool incomplete = false;  // the listing of -n/-p stopped early: jobs beyond it are not cancelled
  if (NeedsListing(a.sel)) {  // -n/-p: CancelJobs cannot filter by them; cancel the listed jobs by id
    RpcStatus st;
    ListOutcome listed;
    auto fetch = [&](const v1::ListJobsRequest& r, v1::ListJobsResponse* resp) { return (st = client.ListJobs(r, resp)).ok(); };
    if (!ListJobPages(NarrowingListRequest(req, a.sel), kMaxListJobs, fetch, &listed)) {
      std::cerr << DescribeRpcError("mlcancel", st, client.Address(), timeout_s) << "\n";
      return ExitCodeForRpc(st.code);
    }
    incomplete = listed.capped || !listed.error.empty();
    if (incomplete)
      std::cerr << "mlcancel: " << (listed.capped ? "more than " + std::to_string(kMaxListJobs) + " jobs match" : listed.error)
                << "; only the jobs listed are cancelled\n";
    if (SelectListedJobs(listed.jobs, a.sel, &req) == 0) return incomplete ? kExitRefused : kExitOk;  // like scancel
  }
  v1::CancelJobsResponse resp;
  auto tell = [](const RpcStatus& failed, double wait_s) {
    std::cerr << "mlcancel: " << SafeText(failed.message) << "; retrying in " << wait_s << " s\n";
  };
  if (RpcStatus st = client.CancelJobs(req, &resp, RetryBudgetFromEnv(), tell); !st.ok()) {
    std::cerr << DescribeRpcError("mlcancel", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  for (const auto& e : resp.errors()) std::cerr << "mlcancel: " << SafeText(e) << "\n";  // may name users, jobs
  ExitNow(resp.errors().empty() && !incomplete ? kExitOk : kExitRefused);
}
