#include "cli/submission.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>

#include "cli/job_format.h"

namespace mlsched::cli {

namespace {

bool IsVarName(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

std::string Basename(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// "job.sh:3: " when the option's value came from a directive, else "".
std::string Where(const SubmitOptions& o, const std::string& option) {
  auto it = o.origin.find(option);
  return it == o.origin.end() ? "" : it->second + ": ";
}

// -n MIN-MAX:STEP: 1 <= MIN <= MAX (<= kMaxTasks, checked by the caller), STEP >= 1 and the
// range a whole number of steps. Sets spec's min_tasks and task_step; returns "" or the error.
std::string CheckTaskRange(const SubmitOptions& o, v1::JobSpec& spec) {
  if (!o.task_range) return "";
  const auto [min, step] = *o.task_range;
  const int64_t max = spec.ntasks();
  const std::string range = std::to_string(min) + "-" + std::to_string(max);
  if (min < 1) return "--ntasks " + range + ": MIN must be >= 1 (got " + std::to_string(min) + ")";
  if (min > max) return "--ntasks " + range + ": MIN must be <= MAX";
  if (step < 1) return "--ntasks " + range + ": STEP must be >= 1 (got " + std::to_string(step) + ")";
  if ((max - min) % step != 0)
    return "--ntasks " + range + ":" + std::to_string(step) + ": MAX - MIN must be a multiple of STEP";
  spec.set_min_tasks(static_cast<int32_t>(min));
  spec.set_task_step(static_cast<int32_t>(step));
  return "";
}

// Checks sizes and counts; returns "" or the error.
std::string CheckSizes(const SubmitOptions& o, v1::JobSpec& spec) {
  int64_t ntasks = o.ntasks.value_or(1);
  if (ntasks < 1) return Where(o, "ntasks") + "--ntasks must be >= 1 (got " + std::to_string(ntasks) + ")";
  if (ntasks > kMaxTasks)
    return Where(o, "ntasks") + "--ntasks must be <= " + std::to_string(kMaxTasks) + " (got " + std::to_string(ntasks) + ")";
  spec.set_ntasks(static_cast<int32_t>(ntasks));
  if (auto err = CheckTaskRange(o, spec); !err.empty()) return Where(o, "ntasks") + err;
  int64_t cpu = o.cpu_millis_per_task.value_or(1000);
  if (cpu <= 0) return Where(o, "cpus-per-task") + "--cpus-per-task must be > 0 (got " + FormatCores(cpu) + ")";
  if (cpu > kMaxCpuMillisPerTask)
    return Where(o, "cpus-per-task") + "--cpus-per-task must be <= " + FormatCores(kMaxCpuMillisPerTask) + " (got " + FormatCores(cpu) + ")";
  spec.set_cpu_millis_per_task(cpu);
  if (o.memory_bytes_per_task) {
    int64_t mem = *o.memory_bytes_per_task;
    if (mem <= 0) return Where(o, "mem-per-task") + "--mem-per-task must be > 0 (got " + std::to_string(mem) + " bytes)";
    if (mem > kMaxMemoryBytesPerTask)
      return Where(o, "mem-per-task") + "--mem-per-task must be <= " + FormatBytes(kMaxMemoryBytesPerTask) + " (got " +
             FormatBytes(mem) + ")";
    spec.set_memory_bytes_per_task(mem);
  }
  int64_t gpus = o.gpus_per_task.value_or(0);
  if (gpus < 0 || gpus > kMaxGpusPerTask)
    return Where(o, "gpus-per-task") + "--gpus-per-task must be in [0, " + std::to_string(kMaxGpusPerTask) + "] (got " +
           std::to_string(gpus) + ")";
  spec.set_gpus_per_task(static_cast<int32_t>(gpus));
  if (o.gpu_types) {
    if (gpus == 0) return Where(o, "gpu-types") + "--gpu-types needs --gpus-per-task >= 1";
    for (const auto& t : *o.gpu_types) spec.add_gpu_types(t);
  }
  if (o.fallback) {
    if (gpus == 0) return Where(o, "fallback") + "--fallback needs --gpus-per-task >= 1";
    for (const auto& [type, after] : *o.fallback) {
      auto* f = spec.add_fallback();
      f->set_accelerator(type);
      f->set_after_s(after);
    }
  }
  int64_t limit = o.time_limit_s.value_or(0);
  if (limit < 0 || limit > kMaxTimeLimitS)
    return Where(o, "time") + "--time must be at most " + FormatDuration(kMaxTimeLimitS) + " (got " + FormatDuration(limit) + ")";
  spec.set_time_limit_s(limit);
  return "";
}

// Checks names, placement and priority options; returns "" or the error.
std::string CheckPlacement(const SubmitOptions& o, v1::JobSpec& spec) {
  static constexpr std::array<const char*, 5> kTopologies{"none", "domain", "zone", "region", "spread"};
  if (o.topology) {
    if (std::find(kTopologies.begin(), kTopologies.end(), *o.topology) == kTopologies.end())
      return Where(o, "topology") + "--topology must be none, domain, zone, region or spread (got '" + *o.topology + "')";
    spec.set_topology(*o.topology);
  }
  int64_t nice = o.nice.value_or(0);
  if (nice < -kMaxNice || nice > kMaxNice)
    return Where(o, "nice") + "--nice must be in [-" + std::to_string(kMaxNice) + ", " + std::to_string(kMaxNice) + "]";
  spec.set_nice(static_cast<int32_t>(nice));
  if (o.job_name) {
    if (o.job_name->empty()) return Where(o, "job-name") + "--job-name must not be empty";
    if (o.job_name->find_first_of("\n\r\t") != std::string::npos)
      return Where(o, "job-name") + "--job-name must not contain tabs or line breaks";
    spec.set_name(*o.job_name);
  }
  spec.set_partition(o.partition.value_or(""));
  spec.set_account(o.account.value_or(""));
  spec.set_qos(o.qos.value_or(""));
  spec.set_stdout_pattern(o.output.value_or(""));
  spec.set_stderr_pattern(o.error.value_or(""));
  spec.set_hold(o.hold.value_or(false));
  spec.set_dependency(o.dependency.value_or(""));
  spec.set_array(o.array.value_or(""));
  spec.set_spot(o.spot.value_or(""));
  spec.set_checkpoint_interval_s(o.checkpoint_interval_s.value_or(0));
  spec.set_data_region(o.data_region.value_or(""));
  spec.set_data_bytes(o.data_bytes.value_or(0));
  spec.set_region_strict(o.region_strict.value_or(false));
  if (spec.region_strict() && spec.data_region().empty())
    return Where(o, "region-strict") + "--region-strict needs --data-region";
  return "";
}

// The container options (each already checked by its parser): all of them need --container-image.
std::string SetContainer(const SubmitOptions& o, v1::JobSpec& spec) {
  if (!o.container_image) {
    const std::pair<const char*, bool> given[] = {
        {"container-mounts", o.container_mounts.has_value()},   {"container-workdir", o.container_workdir.has_value()},
        {"container-env", o.container_env.has_value()},         {"container-writable", o.container_writable.has_value()},
        {"container-mount-home", o.container_mount_home.has_value()},
        {"container-auth-file", o.container_auth_file.has_value()}};
    for (const auto& [name, set] : given)
      if (set) return Where(o, name) + "--" + name + " needs --container-image";
    return "";
  }
  v1::ContainerSpec* c = spec.mutable_container();
  c->set_image(*o.container_image);
  for (const auto& m : o.container_mounts.value_or(std::vector<ContainerMountSpec>{})) {
    auto* out = c->add_mounts();
    out->set_source(m.source);
    out->set_target(m.target);
    out->set_read_only(m.read_only);
  }
  c->set_workdir(o.container_workdir.value_or(""));
  for (const auto& name : o.container_env.value_or(std::vector<std::string>{})) c->add_env(name);
  c->set_writable(o.container_writable.value_or(false));
  if (o.container_mount_home) c->set_mount_home(*o.container_mount_home);
  c->set_auth_file(o.container_auth_file.value_or(""));
  return "";
}

// Fills the command (script or argv) and the default job name.
std::string SetPayload(const SubmitPayload& p, v1::JobSpec& spec) {
  std::string name;
  switch (p.kind) {
    case SubmitPayload::Kind::kScript:
      if (p.script.empty()) return p.script_name + ": the batch script is empty";
      if (p.script.rfind("#!", 0) != 0)
        return p.script_name + ":1: a batch script must start with '#!' and an interpreter (e.g. #!/bin/sh)";
      spec.set_script(p.script);
      name = p.script_name == "stdin" ? "mlsub" : Basename(p.script_name);
      break;
    case SubmitPayload::Kind::kWrap:
      if (p.script.find_first_not_of(" \t\n") == std::string::npos) return "--wrap needs a command";
      spec.set_script("#!/bin/sh\n" + p.script + "\n");
      name = "wrap";
      break;
    case SubmitPayload::Kind::kCommand:
      if (p.argv.empty() || p.argv[0].empty()) return "nothing to run after '--'";
      for (const auto& a : p.argv) spec.add_argv(a);
      name = Basename(p.argv[0]);
      break;
  }
  if (spec.name().empty()) spec.set_name(name);
  return "";
}

}  // namespace

Environment EnvironmentFrom(char** envp) {
  Environment env;
  for (char** e = envp; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

Parsed<Environment> ResolveExport(const std::string& value, const Environment& env) {
  Parsed<Environment> out;
  Environment result;
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    size_t comma = value.find(',', start);
    items.push_back(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string last_assigned;  // the variable a non-name item continues
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    if (item == "ALL" && i == 0) {
      result = env;
    } else if ((item == "NONE" || item.empty()) && i == 0) {
      if (item.empty() && items.size() == 1) result = env;  // --export= means ALL
    } else if (item.empty()) {
      continue;  // "A=1,,B": nothing between the commas
    } else if (auto eq = item.find('='); eq != std::string::npos && IsVarName(item.substr(0, eq))) {
      last_assigned = item.substr(0, eq);
      result[last_assigned] = item.substr(eq + 1);
    } else if (IsVarName(item)) {
      last_assigned.clear();
      if (auto it = env.find(item); it != env.end()) result[item] = it->second;
    } else if (!last_assigned.empty()) {
      result[last_assigned] += "," + item;
    } else {
      out.error = "bad --export item '" + item + "': not a variable name, VAR=value, ALL or NONE";
      return out;
    }
  }
  result.erase("MLSCHED_TOKEN");
  out.value = std::move(result);
  return out;
}

Parsed<v1::JobSpec> BuildJobSpec(const SubmitOptions& opts, const SubmitPayload& payload, const SubmitContext& ctx) {
  Parsed<v1::JobSpec> out;
  v1::JobSpec spec;
  std::string err = CheckSizes(opts, spec);
  if (err.empty()) err = CheckPlacement(opts, spec);
  if (err.empty()) err = SetContainer(opts, spec);
  if (err.empty()) err = SetPayload(payload, spec);
  if (!err.empty()) {
    out.error = err;
    return out;
  }
  std::filesystem::path dir = opts.chdir.value_or(ctx.cwd);
  if (dir.empty()) {
    out.error = Where(opts, "chdir") + "--chdir must not be empty";
    return out;
  }
  if (dir.is_relative()) dir = std::filesystem::path(ctx.cwd) / dir;
  std::string workdir = dir.lexically_normal().string();
  while (workdir.size() > 1 && workdir.back() == '/') workdir.pop_back();
  spec.set_workdir(workdir);
  if (ctx.umask) spec.set_umask(*ctx.umask & 0777);
  auto env = ResolveExport(opts.export_env.value_or("ALL"), ctx.env);
  if (!env) {
    out.error = Where(opts, "export") + env.error;
    return out;
  }
  spec.mutable_env()->insert(env.value->begin(), env.value->end());
  out.value = std::move(spec);
  return out;
}

Parsed<Submission> PrepareSubmission(const SubmitArgs& args, const SubmitContext& ctx, const ReadFileFn& read_file,
                                     const std::function<std::string()>& read_stdin) {
  Parsed<Submission> out;
  Submission sub;
  const SubmitOptions& cli = args.options;
  if (args.positionals.size() > 1) {
    out.error = "arguments after the script '" + args.positionals[0] + "' are not supported (got '" + args.positionals[1] +
                "'); put options before the script, or run a command with: mlsub [OPTIONS] -- CMD ARGS";
    return out;
  }
  bool script_file = !args.positionals.empty();
  int sources = (cli.wrap ? 1 : 0) + (script_file ? 1 : 0) + (args.has_command ? 1 : 0);
  if (sources > 1) {
    out.error = "give only one of: a script file, --wrap CMD, or -- CMD ARGS";
    return out;
  }
  SubmitPayload payload;
  if (cli.wrap) {
    payload.kind = SubmitPayload::Kind::kWrap;
    payload.script = *cli.wrap;
  } else if (args.has_command) {
    payload.kind = SubmitPayload::Kind::kCommand;
    payload.argv = args.command;
  } else {
    payload.kind = SubmitPayload::Kind::kScript;
    if (script_file) {
      payload.script_name = args.positionals[0];
      auto text = read_file(payload.script_name);
      if (!text) {
        out.error = text.error;
        return out;
      }
      payload.script = std::move(*text.value);
    } else {
      payload.script_name = "stdin";
      payload.script = read_stdin();
    }
  }
  SubmitOptions merged;
  if (payload.kind == SubmitPayload::Kind::kScript) {
    auto directives = ParseDirectives(payload.script, payload.script_name);
    if (!directives) {
      out.error = directives.error;
      return out;
    }
    merged = std::move(directives.value->options);
    sub.warnings = std::move(directives.value->warnings);
  }
  OverlayOptions(merged, cli);
  auto spec = BuildJobSpec(merged, payload, ctx);
  if (!spec) {
    out.error = spec.error;
    return out;
  }
  sub.spec = std::move(*spec.value);
  sub.options = std::move(merged);
  out.value = std::move(sub);
  return out;
}

}  // namespace mlsched::cli
