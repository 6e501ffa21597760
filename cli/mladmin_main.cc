// mladmin: node inventory and operator actions (like scontrol).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <ctime>
#include <functional>
#include <iostream>

#include "cli/admin_format.h"
#include "cli/exit_codes.h"
#include "cli/job_states.h"
#include "cli/json_text.h"
#include "cli/policy_check.h"
#include "cli/rpc.h"
#include "common/safe_text.h"
#include "common/units.h"

namespace {

using namespace mlsched;
using namespace mlsched::cli;

constexpr int kTimeoutS = 30;

struct AdminArgs {
  std::string server, node, reason, in, job, file;
  bool json = false;
};

// Prints a failed call and returns its exit code.
int Fail(const SchedClient& client, const RpcStatus& st) {
  std::cerr << DescribeRpcError("mladmin", st, client.Address(), kTimeoutS) << "\n";
  return ExitCodeForRpc(st.code);
}

// The job id argument, checked before the action runs (see main).
int64_t JobId(const AdminArgs& a) { return *ParseJobId(a.job).value; }

int Nodes(SchedClient& client, const AdminArgs& a) {
  v1::ListNodesResponse resp;
  if (RpcStatus st = client.ListNodes(&resp); !st.ok()) return Fail(client, st);
  std::vector<v1::NodeInfo> nodes(resp.nodes().begin(), resp.nodes().end());
  if (!a.json) {
    std::cout << FormatNodeTable(nodes);
    return kExitOk;
  }
  std::sort(nodes.begin(), nodes.end(), [](const auto& x, const auto& y) { return x.name() < y.name(); });
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& n : nodes) arr.push_back(NodeJson(n));
  std::cout << JsonText(arr, 2) << "\n";
  return kExitOk;
}

int ShowJob(SchedClient& client, const AdminArgs& a) {
  v1::JobInfo job;
  if (RpcStatus st = client.GetJob(JobId(a), &job); !st.ok()) return Fail(client, st);
  const int64_t now = std::time(nullptr);
  if (a.json) std::cout << JsonText(JobDetailJson(job, now), 2) << "\n";
  else std::cout << FormatJobDetail(job, now);
  return kExitOk;
}

int Evict(SchedClient& client, const AdminArgs& a) {
  auto in = ParseDuration(a.in);
  if (!in) {
    std::cerr << "mladmin: --in: " << in.error << "\n";
    return kExitUsage;
  }
  if (RpcStatus st = client.EvictNode(a.node, *in.value); !st.ok()) return Fail(client, st);
  return kExitOk;
}

// mladmin policy check FILE: the file loaded here exactly as schedd loads --policy; no schedd needed.
int CheckPolicy(const AdminArgs& a) {
  PolicyCheckResult r = CheckPolicyFile(a.file);
  if (!r.ok) {
    for (const auto& e : r.errors) std::cerr << SafeText(e) << "\n";  // they quote the file
    std::cerr << "mladmin: " << SafeText(a.file) << " is not a valid policy (" << r.errors.size()
              << (r.errors.size() == 1 ? " error)" : " errors)") << "\n";
    return kExitRefused;
  }
  std::cout << SafeText(a.file) << ": OK: " << SafeText(r.summary) << "\n";
  return kExitOk;
}

// mladmin policy reload: schedd re-reads its --policy file (like SIGHUP); errors keep the old one.
int ReloadPolicy(SchedClient& client) {
  v1::ReloadPolicyResponse resp;
  if (RpcStatus st = client.ReloadPolicy(&resp); !st.ok()) return Fail(client, st);
  if (!resp.reloaded()) {
    for (const auto& e : resp.errors()) std::cerr << SafeText(e) << "\n";  // schedd's, quoting the file
    std::cerr << "mladmin: " << SafeText(resp.path()) << " has errors; schedd keeps the running policy\n";
    return kExitRefused;
  }
  std::cout << "Policy reloaded from " << SafeText(resp.path()) << "\n";
  return kExitOk;
}

// mladmin ha status: the HA state as the first replica that answers sees it (followers answer too).
int HaStatus(SchedClient& client, const AdminArgs& a) {
  v1::HaStatusResponse resp;
  if (RpcStatus st = client.HaStatus(&resp); !st.ok()) return Fail(client, st);
  if (a.json) std::cout << JsonText(HaStatusJson(resp), 2) << "\n";
  else std::cout << FormatHaStatus(resp);
  return kExitOk;
}

// Declares the subcommands; `action` is set to the chosen one's handler (`local` for those that
// need no schedd).
void AddCommands(CLI::App& app, AdminArgs& a, std::function<int(SchedClient&)>& action, std::function<int()>& local) {
  app.set_help_flag("--help", "print this help");
  app.add_option("--server", a.server, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas; default: $MLSCHED_SERVER)");
  app.require_subcommand(1);
  app.fallthrough();
  app.footer("Draining, resuming, evicting and reloading the policy need root or an operator named in the policy.\n\n" +
             ExitCodesHelp());

  auto* nodes = app.add_subcommand("nodes", "list nodes: NODE POOL STATE CPUS(A/T) MEM GPUS(A/T) DOMAIN ZONE REGION ISOLATION REASON");
  nodes->add_flag("--json", a.json, "print a JSON array of node objects");
  nodes->callback([&] { action = [&](SchedClient& c) { return Nodes(c, a); }; });

  auto* drain = app.add_subcommand("drain", "stop placing jobs on a node (running jobs finish)");
  drain->add_option("node", a.node, "node name")->required();
  drain->add_option("--reason", a.reason, "why (shown in mladmin nodes)")->required();
  drain->callback([&] {
    action = [&](SchedClient& c) {
      RpcStatus st = c.DrainNode(a.node, a.reason, false);
      return st.ok() ? kExitOk : Fail(c, st);
    };
  });

  auto* resume = app.add_subcommand("resume", "return a drained node to service");
  resume->add_option("node", a.node, "node name")->required();
  resume->callback([&] {
    action = [&](SchedClient& c) {
      RpcStatus st = c.DrainNode(a.node, "", true);
      return st.ok() ? kExitOk : Fail(c, st);
    };
  });

  auto* node = app.add_subcommand("node", "node actions");
  node->require_subcommand(1);
  auto* evict = node->add_subcommand("evict", "announce that a node goes away (spot eviction): drain it and requeue its jobs");
  evict->add_option("node", a.node, "node name")->required();
  evict->add_option("--in", a.in, "time until the node goes away: 30s, 2m, M:S")->required();
  evict->callback([&] { action = [&](SchedClient& c) { return Evict(c, a); }; });

  for (bool release : {false, true}) {
    auto* hold = app.add_subcommand(release ? "release" : "hold", release ? "release a held job" : "hold a pending job");
    hold->add_option("job", a.job, "job id")->required();
    hold->callback([&a, &action, release] {
      action = [&a, release](SchedClient& c) {
        RpcStatus st = c.HoldJob(JobId(a), release, RetryBudgetFromEnv(), [](const RpcStatus& failed, double wait_s) {
          std::cerr << "mladmin: " << SafeText(failed.message) << "; retrying in " << wait_s << " s\n";
        });
        return st.ok() ? kExitOk : Fail(c, st);
      };
    });
  }

  auto* show = app.add_subcommand("show", "show an object in full");
  show->require_subcommand(1);
  auto* job = show->add_subcommand("job", "every field of a job");
  job->add_option("id", a.job, "job id")->required();
  job->add_flag("--json", a.json, "print a JSON object");
  job->callback([&] { action = [&](SchedClient& c) { return ShowJob(c, a); }; });

  auto* policy = app.add_subcommand("policy", "policy file actions");
  policy->require_subcommand(1);
  auto* check = policy->add_subcommand(
      "check", "check a policy TOML file here, as schedd would load it: every error as FILE:LINE:COL (exit 1)");
  check->add_option("file", a.file, "policy file")->required();
  check->callback([&] { local = [&] { return CheckPolicy(a); }; });
  auto* reload = policy->add_subcommand(
      "reload", "make schedd re-read its --policy file like SIGHUP: all or nothing; errors keep the running policy");
  reload->callback([&] { action = [](SchedClient& c) { return ReloadPolicy(c); }; });

  auto* ha = app.add_subcommand("ha", "high availability (several schedd replicas)");
  ha->require_subcommand(1);
  auto* ha_status = ha->add_subcommand(
      "status", "mode, leader, epoch, etcd, and the replicas: ADDRESS ROLE REVISION LAG (any replica answers)");
  ha_status->add_flag("--json", a.json, "print a JSON object");
  ha_status->callback([&] { action = [&](SchedClient& c) { return HaStatus(c, a); }; });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mladmin: nodes and operator actions (like scontrol)", "mladmin"};
  AdminArgs a;
  std::function<int(SchedClient&)> action;
  std::function<int()> local;
  AddCommands(app, a, action, local);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "mladmin: " << e.what() << "\nTry 'mladmin --help'.\n";
    return kExitUsage;
  }
  if (auto id = ParseJobId(a.job); !a.job.empty() && !id) {
    std::cerr << "mladmin: " << id.error << "\n";
    return kExitUsage;
  }
  if (local) return local();
  if (!action) {
    std::cerr << "mladmin: no command given\nTry 'mladmin --help'.\n";
    return kExitUsage;
  }
  SchedClient client(a.server, kTimeoutS);
  if (!client.ConfigError().empty()) {
    std::cerr << "mladmin: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  ExitNow(action(client));
}
