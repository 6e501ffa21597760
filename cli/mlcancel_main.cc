// mlcancel: cancel or signal jobs (like scancel).
#include <pwd.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/exit_codes.h"
#include "cli/job_states.h"
#include "cli/rpc.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

struct CancelArgs {
  std::vector<std::string> ids;
  std::string user, states, signal, name, partition, server;
};

void AddOptions(CLI::App& app, CancelArgs& a) {
  app.set_help_flag("--help", "print this help");
  app.add_option("job_ids", a.ids, "jobs to cancel");
  app.add_option("-u,--user", a.user, "jobs of this user");
  app.add_option("-t,--state", a.states, "only jobs in these states (names or codes, comma list)");
  app.add_option("-s,--signal", a.signal, "send this signal (TERM, USR1, KILL, ... or a number) instead of cancelling");
  app.add_option("-n,--name", a.name, "only jobs with this name");
  app.add_option("-p,--partition", a.partition, "only jobs of this partition");
  app.add_option("--server", a.server, "schedd address: unix:PATH or HOST:PORT (default: $MLSCHED_SERVER)");
  app.footer(
      "Selects jobs by id and/or filters. Without job ids and without -u, filters apply to your own jobs.\n"
      "Prints one error line per job that could not be cancelled.\n\n" +
      ExitCodesHelp());
}

std::string CurrentUser() {
  if (struct passwd* pw = getpwuid(getuid())) return pw->pw_name;
  return std::to_string(getuid());
}

// Builds the cancel request; returns "" or a usage error.
std::string BuildRequest(const CancelArgs& a, v1::CancelJobsRequest* req) {
  for (const auto& s : a.ids) {
    auto id = ParseJobId(s);
    if (!id) return id.error;
    req->add_job_ids(*id.value);
  }
  if (!a.states.empty()) {
    auto states = ParseStates(a.states);
    if (!states) return "--state: " + states.error;
    for (auto s : *states.value) req->add_states(s);
  }
  if (!a.signal.empty()) {
    auto sig = ParseSignal(a.signal);
    if (!sig) return "--signal: " + sig.error;
    req->set_signal(*sig.value);
  }
  if (req->job_ids().empty() && a.user.empty() && a.states.empty() && a.name.empty() && a.partition.empty())
    return "nothing to cancel: give job ids or a filter (-u, -t, -n, -p)";
  req->set_user(!a.user.empty() || !req->job_ids().empty() ? a.user : CurrentUser());
  return "";
}

// For -n/-p, which CancelJobs cannot filter by: lists the matching unfinished jobs and turns the
// request into one by explicit ids. Returns the RPC status of the listing.
RpcStatus NarrowByNameAndPartition(SchedClient& client, const CancelArgs& a, v1::CancelJobsRequest* req) {
  v1::ListJobsRequest list;
  *list.mutable_job_ids() = req->job_ids();
  if (!req->user().empty()) list.add_users(req->user());
  *list.mutable_states() = req->states();
  if (!a.partition.empty()) list.add_partitions(a.partition);
  v1::ListJobsResponse resp;
  RpcStatus st = client.ListJobs(list, &resp);
  if (!st.ok()) return st;
  req->clear_job_ids();
  req->clear_user();
  req->clear_states();
  for (const auto& j : resp.jobs())
    if (!IsFinished(j.state()) && (a.name.empty() || j.spec().name() == a.name)) req->add_job_ids(j.job_id());
  return st;
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
  v1::CancelJobsRequest req;
  if (std::string err = BuildRequest(a, &req); !err.empty()) {
    std::cerr << "mlcancel: " << err << "\n";
    return kExitUsage;
  }
  const int timeout_s = 30;
  SchedClient client(a.server, timeout_s);
  if (!a.name.empty() || !a.partition.empty()) {
    if (RpcStatus st = NarrowByNameAndPartition(client, a, &req); !st.ok()) {
      std::cerr << DescribeRpcError("mlcancel", st, client.Address(), timeout_s) << "\n";
      return ExitCodeForRpc(st.code);
    }
    if (req.job_ids().empty()) return kExitOk;  // nothing matched, like scancel
  }
  v1::CancelJobsResponse resp;
  if (RpcStatus st = client.CancelJobs(req, &resp); !st.ok()) {
    std::cerr << DescribeRpcError("mlcancel", st, client.Address(), timeout_s) << "\n";
    return ExitCodeForRpc(st.code);
  }
  for (const auto& e : resp.errors()) std::cerr << "mlcancel: " << e << "\n";
  return resp.errors().empty() ? kExitOk : kExitRefused;
}
