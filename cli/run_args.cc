#include "cli/run_args.h"

#include <ctime>
#include <map>
#include <set>

#include "common/hostlist.h"

namespace mlsched::cli {
namespace {

const SubmitOptionDef* FindLong(const std::string& name) {
  for (const auto& d : SubmitOptionTable())
    for (const auto& n : d.long_names)
      if (n == name) return &d;
  return nullptr;
}

const SubmitOptionDef* FindShort(char c) {
  for (const auto& d : SubmitOptionTable())
    if (d.short_name == c) return &d;
  return nullptr;
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// One of mlrun's own options at args[*i] (advancing *i past a separate value); "" when it was
// one, "-" when it was not, else the error.
std::string TakeOwn(const std::vector<std::string>& args, size_t* i, bool mlalloc, RunOptions* o) {
  const std::string& a = args[*i];
  const auto eq = a.find('=');
  const std::string name = a.rfind("--", 0) == 0 ? a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2) : a;
  auto value = [&](std::string* v) -> std::string {
    if (eq != std::string::npos && a.rfind("--", 0) == 0) {
      *v = a.substr(eq + 1);
      return "";
    }
    if (*i + 1 >= args.size()) return "option " + a + " needs a value";
    *v = args[++*i];
    return "";
  };
  if (name == "-Q" || name == "quiet") {
    o->quiet = true;
    return "";
  }
  if (mlalloc) return "-";
  if (name == "overlap") {
    o->overlap = true;
    return "";
  }
  if (name == "pty") {
    o->pty = true;
    return "";
  }
  if (name == "-l" || name == "label") {
    o->label = true;
    return "";
  }
  std::string v;
  if (name == "jobid") {
    if (auto e = value(&v); !e.empty()) return e;
    if (!ParseInt(v, &o->job_id) || o->job_id <= 0) return "--jobid: '" + v + "' is not a job id";
    return "";
  }
  if (name == "rank") {
    if (auto e = value(&v); !e.empty()) return e;
    int64_t r = 0;
    if (!ParseInt(v, &r) || r > 1000000) return "--rank: '" + v + "' is not a rank";
    o->rank = static_cast<int32_t>(r);
    return "";
  }
  if (name == "-i" || name == "input") {
    if (auto e = value(&v); !e.empty()) return e;
    int64_t r = 0;
    if (v != "all" && v != "none" && !ParseInt(v, &r)) return "--input: '" + v + "' is not 0|all|none|RANK";
    o->input = v;
    return "";
  }
  return "-";
}

}  // namespace

Parsed<RunArgs> ParseRunArgs(const std::vector<std::string>& args, bool mlalloc) {
  Parsed<RunArgs> out;
  RunArgs r;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.empty() || a[0] != '-' || a == "-") {  // the command starts
      rest.insert(rest.end(), args.begin() + static_cast<long>(i), args.end());
      break;
    }
    std::string err = TakeOwn(args, &i, mlalloc, &r.own);
    if (err.empty()) continue;
    if (err != "-") {
      out.error = err;
      return out;
    }
    rest.push_back(a);  // one of mlsub's options (or an unknown one, which ParseSubmitArgs names)
    const SubmitOptionDef* d = nullptr;
    bool inline_value = false;
    if (a.rfind("--", 0) == 0) {
      const auto eq = a.find('=');
      d = FindLong(a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      inline_value = eq != std::string::npos;
    } else {
      d = FindShort(a[1]);
      inline_value = a.size() > 2;
    }
    if (d && !d->value_name.empty() && !inline_value && i + 1 < args.size()) rest.push_back(args[++i]);
  }
  auto sub = ParseSubmitArgs(rest);
  if (!sub) {
    out.error = sub.error;
    return out;
  }
  r.submit = std::move(*sub.value);
  r.command = r.submit.has_command ? r.submit.command : r.submit.positionals;
  r.submit.positionals.clear();
  r.submit.command.clear();
  r.submit.has_command = false;
  out.value = std::move(r);
  return out;
}

const std::vector<std::string>& AllocationHoldCommand() {
  // Waits; SIGTERM (the release) ends it with 0. Rank 0's reserved rendezvous socket stays open
  // in it, bound and not listening: a step's rank 0 that binds MASTER_PORT with SO_REUSEADDR (as
  // PyTorch's TCPStore does) still can (agentd/rendezvous_port.h).
  static const std::vector<std::string> argv = {"/bin/sh", "-c", "trap 'exit 0' TERM HUP; sleep 2147483647 & wait"};
  return argv;
}

Parsed<v1::JobSpec> BuildAllocationSpec(const SubmitArgs& submit, const SubmitContext& ctx, const std::string& default_name) {
  Parsed<v1::JobSpec> out;
  const SubmitOptions& o = submit.options;
  if (o.task_range) out.error = "elastic sizes (-n MIN-MAX) are for batch jobs: an allocation has one size";
  else if (o.array) out.error = "--array is for batch jobs";
  else if (o.wrap) out.error = "--wrap is for mlsub: give the command after the options";
  else if (o.hold && *o.hold) out.error = "--hold is for mlsub";
  if (!out.error.empty()) return out;
  SubmitOptions opts = o;
  if (!opts.job_name) opts.job_name = default_name;
  if (!opts.output) opts.output = "/dev/null";  // the hold prints nothing: no file in the directory

  SubmitPayload payload;
  payload.kind = SubmitPayload::Kind::kCommand;
  payload.argv = AllocationHoldCommand();
  Parsed<v1::JobSpec> spec = BuildJobSpec(opts, payload, ctx);
  if (spec.value) spec.value->set_interactive(true);  // the policy's [interactive] applies
  return spec;
}

std::vector<std::string> StepEnv(int32_t i, int32_t n, const std::vector<v1::TaskPlacement>& step_tasks) {
  const std::string& node = step_tasks.at(static_cast<size_t>(i)).node();
  int32_t local = 0, on_node = 0;
  for (int32_t j = 0; j < n; ++j)
    if (step_tasks[static_cast<size_t>(j)].node() == node) {
      if (j < i) ++local;
      ++on_node;
    }
  return {"RANK=" + std::to_string(i), "WORLD_SIZE=" + std::to_string(n), "LOCAL_RANK=" + std::to_string(local),
          "LOCAL_WORLD_SIZE=" + std::to_string(on_node), "MLSCHED_STEP_NTASKS=" + std::to_string(n)};
}

std::vector<std::string> AllocationEnv(const v1::JobInfo& job) {
  std::vector<std::string> nodes;
  std::set<std::string> seen;
  for (const auto& t : job.tasks())
    if (seen.insert(t.node()).second) nodes.push_back(t.node());
  const std::string list = CompressHostlist(nodes), id = std::to_string(job.job_id()),
                    ntasks = std::to_string(job.tasks_size());
  return {"MLSCHED_JOB_ID=" + id,     "MLSCHED_NODELIST=" + list, "MLSCHED_NTASKS=" + ntasks,
          "SLURM_JOB_ID=" + id,       "SLURM_JOBID=" + id,        "SLURM_JOB_NODELIST=" + list,
          "SLURM_NODELIST=" + list,   "SLURM_NTASKS=" + ntasks,   "SLURM_NPROCS=" + ntasks};
}

std::string PendingLine(const v1::JobInfo& job) {
  std::string s = "job " + std::to_string(job.job_id()) + " pending";
  if (!job.reason().empty())
    s += " (" + job.reason() + (job.reason_detail().empty() ? "" : ": " + job.reason_detail()) + ")";
  if (job.expected_start() > 0) {
    const time_t t = static_cast<time_t>(job.expected_start());
    struct tm tm{};
    char buf[32];
    if (localtime_r(&t, &tm) && strftime(buf, sizeof buf, "%H:%M:%S", &tm)) s += ", expected start " + std::string(buf);
  }
  return s;
}

}  // namespace mlsched::cli
