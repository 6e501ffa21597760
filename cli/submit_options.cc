#include "cli/submit_options.h"

#include "schedd/core/dependency.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

namespace mlsched::cli {

namespace {

using Apply = std::function<std::string(SubmitOptions&, const std::string&)>;

std::string ParseInt(const std::string& v, std::optional<int64_t>& out) {
  int64_t n = 0;
  const char* end = v.data() + v.size();
  auto [p, ec] = std::from_chars(v.data(), end, n);
  if (v.empty() || ec != std::errc() || p != end) return "'" + v + "' is not an integer";
  out = n;
  return "";
}

template <typename F>
Apply Units(std::optional<int64_t> SubmitOptions::*field, F parse) {
  return [field, parse](SubmitOptions& o, const std::string& v) -> std::string {
    auto r = parse(v);
    if (!r) return r.error;
    o.*field = *r.value;
    return "";
  };
}

Apply Int(std::optional<int64_t> SubmitOptions::*field) {
  return [field](SubmitOptions& o, const std::string& v) { return ParseInt(v, o.*field); };
}

// -n N (rigid), -n MIN-MAX or -n MIN-MAX:STEP (elastic); the range is checked in CheckSizes.
std::string ApplyTasks(SubmitOptions& o, const std::string& v) {
  const size_t dash = v.find('-', 1);  // from 1: "-3" is a (bad) number, not a range
  if (dash == std::string::npos) {
    o.task_range.reset();
    return ParseInt(v, o.ntasks);
  }
  const size_t colon = v.find(':', dash);
  std::optional<int64_t> min, max, step = int64_t{1};
  if (ParseInt(v.substr(0, dash), min) != "" ||
      ParseInt(v.substr(dash + 1, colon == std::string::npos ? std::string::npos : colon - dash - 1), max) != "" ||
      (colon != std::string::npos && ParseInt(v.substr(colon + 1), step) != ""))
    return "'" + v + "' is not N, MIN-MAX or MIN-MAX:STEP";
  o.ntasks = max;
  o.task_range = std::pair{*min, *step};
  return "";
}

Apply Text(std::optional<std::string> SubmitOptions::*field) {
  return [field](SubmitOptions& o, const std::string& v) {
    o.*field = v;
    return std::string();
  };
}

std::string ApplyGpuTypes(SubmitOptions& o, const std::string& v) {
  std::vector<std::string> types;
  std::stringstream in(v);
  for (std::string t; std::getline(in, t, ',');) {
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t.empty()) return "empty GPU type in '" + v + "'";
    if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  }
  if (types.empty()) return "expected a comma list of GPU types (e.g. h100,a100)";
  o.gpu_types = std::move(types);
  return "";
}

// --fallback a100@10m,cpu@1h: accelerator tiers, each opened once the job has waited that long.
std::string ApplyFallback(SubmitOptions& o, const std::string& v) {
  std::vector<std::pair<std::string, int64_t>> tiers;
  std::stringstream in(v);
  for (std::string t; std::getline(in, t, ',');) {
    auto at = t.find('@');
    if (at == std::string::npos || at == 0)
      return "expected TYPE@WAIT in '" + t + "' (e.g. a100@10m,cpu@1h)";
    std::string type = t.substr(0, at);
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return std::tolower(c); });
    auto wait = ParseDuration(t.substr(at + 1));
    if (!wait) return "bad wait in '" + t + "': " + wait.error;
    if (!tiers.empty() && *wait.value < tiers.back().second)
      return "fallback tiers must open in order of their wait ('" + t + "' opens before the previous one)";
    tiers.emplace_back(type, *wait.value);
  }
  if (tiers.empty()) return "expected a comma list of TYPE@WAIT (e.g. a100@10m,cpu@1h)";
  o.fallback = std::move(tiers);
  return "";
}

// -d afterok:12:13_2,singleton: checked here so that a typo fails before the server is asked.
std::string ApplyDependency(SubmitOptions& o, const std::string& v) {
  core::DependencyRequest req;
  if (auto err = core::ParseDependency(v, &req)) return *err;
  o.dependency = v;
  return "";
}

// -a 0-99%10: the server applies its own size limit (--max-array-size).
std::string ApplyArray(SubmitOptions& o, const std::string& v) {
  core::ArrayRequest req;
  if (auto err = core::ParseArray(v, core::kMaxArrayTaskId + 1, &req)) return *err;
  o.array = v;
  return "";
}

std::vector<SubmitOptionDef> MakeTable() {
  using O = SubmitOptions;
  auto flag = [](std::optional<bool> O::*f) {
    return [f](O& o, const std::string&) {
      o.*f = true;
      return std::string();
    };
  };
  return {
      {'J', {"job-name"}, "NAME", true, "job name (default: the script's file name)", Text(&O::job_name)},
      {'n', {"ntasks"}, "N", true,
       "number of tasks: the gang size, started all-or-nothing (default 1); MIN-MAX[:STEP] = an elastic "
       "gang started with the largest size that fits",
       ApplyTasks},
      {'c', {"cpus-per-task"}, "CPUS", true, "CPUs per task; fractions allowed: 0.5, 1500m (default 1)",
       Units(&O::cpu_millis_per_task, ParseCpus)},
      {0, {"mem-per-task"}, "SIZE", true, "memory per task: 4G, 512M; a bare number is MB",
       Units(&O::memory_bytes_per_task, ParseMemory)},
      {0, {"gpus-per-task"}, "N", true, "GPUs per task", Int(&O::gpus_per_task)},
      {0, {"gpu-types", "gpu-type"}, "LIST", true, "acceptable GPU types, preferred first: h100,a100", ApplyGpuTypes},
      {0, {"fallback"}, "TIERS", true, "accelerator fallback after waiting: a100@10m,cpu@1h (cpu = no GPUs)", ApplyFallback},
      {'t', {"time"}, "TIME", true, "time limit: M, M:S, H:M:S, D-H[:M[:S]], 30m, 4h (default: the partition's)",
       Units(&O::time_limit_s, ParseDuration)},
      {'p', {"partition"}, "NAME", true, "partition (default: the default partition)", Text(&O::partition)},
      {'A', {"account"}, "NAME", true, "account to charge (default: your default account)", Text(&O::account)},
      {0, {"qos"}, "NAME", true, "quality of service", Text(&O::qos)},
      {'o', {"output"}, "PATTERN", true, "stdout file; %j job id, %t rank, %u user, %x job name, %A array job id, %a array index", Text(&O::output)},
      {'e', {"error"}, "PATTERN", true, "stderr file (default: the stdout file)", Text(&O::error)},
      {'D', {"chdir"}, "DIR", true, "working directory of the tasks (default: the current directory)", Text(&O::chdir)},
      {0, {"export"}, "VARS", true, "environment: ALL (default), NONE, ALL,VAR=val,... or VAR,VAR=val,...",
       Text(&O::export_env)},
      {'H', {"hold"}, "", true, "submit held (pending until mladmin release)", flag(&O::hold)},
      {0, {"topology"}, "MODE", true, "placement: none, domain, zone, region or spread", Text(&O::topology)},
      {0, {"nice"}, "N", true, "nice value: larger means lower priority", Int(&O::nice)},
      {'d', {"dependency"}, "LIST", true,
       "start after other jobs: afterok:ID[:ID], afterany, afternotok, after, singleton; ',' = all, '?' = any; "
       "ID_TASK names an array element",
       ApplyDependency},
      {'a', {"array"}, "INDEXES", true, "job array: 0-99, 1,3,5-11:2; %N runs at most N at once (0-99%10)",
       ApplyArray},
      {0, {"spot"}, "WHEN", true,
       "spot nodes: never, allow (cheaper expected cost first) or prefer (spot only for the policy's wait "
       "budget); default: allow when --checkpoint-interval is given, else never",
       [](O& o, const std::string& v) {
         if (v != "never" && v != "allow" && v != "prefer") return "expected never, allow or prefer (got '" + v + "')";
         o.spot = v;
         return std::string();
       }},
      {0, {"checkpoint-interval"}, "TIME", true, "how often the job checkpoints (e.g. 10m): sets the work a spot eviction loses",
       Units(&O::checkpoint_interval_s, ParseDuration)},
      {0, {"data-region"}, "REGION", true, "region where the job's data lives: placement prefers it", Text(&O::data_region)},
      {0, {"data-size"}, "SIZE", true, "size of that data (500G): egress is charged when run elsewhere",
       Units(&O::data_bytes, ParseMemory)},
      {0, {"region-strict"}, "", true, "run only in --data-region", flag(&O::region_strict)},
      {0, {"container-image"}, "IMAGE", true,
       "run the tasks in this OCI image: [docker://][REGISTRY/]NAME[:TAG][@sha256:DIGEST] (enroot's "
       "REGISTRY#NAME too), oci-archive:PATH, docker-archive:PATH or oci:DIR[:TAG] (paths on the nodes)",
       [](O& o, const std::string& v) {
         ImageRef ref;
         if (std::string err = ParseImageRef(v, &ref); !err.empty()) return err;
         o.container_image = ref.Canonical();
         return std::string();
       }},
      {0, {"container-mounts"}, "MOUNTS", true, "bind mounts into the container: SRC[:DST[:ro|rw]],...",
       [](O& o, const std::string& v) {
         std::vector<ContainerMountSpec> m;
         if (std::string err = ParseContainerMounts(v, &m); !err.empty()) return err;
         o.container_mounts = std::move(m);
         return std::string();
       }},
      {0, {"container-workdir"}, "DIR", true, "working directory in the container (default: the image's)",
       [](O& o, const std::string& v) {
         if (std::string err = CheckContainerPath("container workdir", v); !err.empty()) return err;
         o.container_workdir = v;
         return std::string();
       }},
      {0, {"container-env"}, "NAMES", true, "variables of the job's environment that override the image's: NAME,...",
       [](O& o, const std::string& v) {
         std::vector<std::string> names;
         if (std::string err = ParseContainerEnvNames(v, &names); !err.empty()) return err;
         o.container_env = std::move(names);
         return std::string();
       }},
      {0, {"container-auth-file"}, "FILE", true,
       "registry credentials on the nodes (containers-auth.json, e.g. from skopeo login --authfile), read as you",
       [](O& o, const std::string& v) {
         if (std::string err = CheckContainerPath("container auth file", v); !err.empty()) return err;
         o.container_auth_file = v;
         return std::string();
       }},
      {0, {"container-writable"}, "", true, "a private writable overlay per task, discarded at its end (default: "
       "read-only image, tmpfs /tmp)", flag(&O::container_writable)},
      {0, {"container-mount-home"}, "", true, "bind-mount your home directory (the default)", flag(&O::container_mount_home)},
      {0, {"no-container-mount-home"}, "", true, "do not mount your home directory",
       [](O& o, const std::string&) {
         o.container_mount_home = false;
         return std::string();
       }},
      {0, {"wrap"}, "CMD", false, "run CMD in /bin/sh instead of a script", Text(&O::wrap)},
      {0, {"parsable"}, "", false, "print only the job id",
       [](O& o, const std::string&) {
         o.parsable = true;
         return std::string();
       }},
      {0, {"server"}, "ADDR", false, "schedd address: unix:PATH, or HOST:PORT,HOST:PORT,... (replicas; default: $MLSCHED_SERVER)",
       Text(&O::server)},
      {0, {"submission-key"}, "KEY", false,
       "submit again under the key an unconfirmed mlsub printed: the job it stored, if any, instead of a second one",
       [](O& o, const std::string& v) {
         const bool ok = !v.empty() && v.size() <= kMaxSubmissionKeyChars &&
                         std::all_of(v.begin(), v.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                         });
         if (!ok)
           return "--submission-key must be 1 to " + std::to_string(kMaxSubmissionKeyChars) +
                  " letters, digits, '-', '_' or '.'";
         o.submission_key = v;
         return std::string();
       }},
      {'h', {"help"}, "", false, "print this help",
       [](O& o, const std::string&) {
         o.help = true;
         return std::string();
       }},
  };
}

const SubmitOptionDef* FindLong(const std::string& name) {
  for (const auto& d : SubmitOptionTable())
    if (std::find(d.long_names.begin(), d.long_names.end(), name) != d.long_names.end()) return &d;
  return nullptr;
}

const SubmitOptionDef* FindShort(char c) {
  for (const auto& d : SubmitOptionTable())
    if (d.short_name == c) return &d;
  return nullptr;
}

// Parses options from `words[0]` on, stopping at the first positional or "--" (whose index is
// returned through `stop`). `loc` is the directive's "file:line" ("" on the command line): it is
// recorded as the origin of each value, and errors then say " in #MLSUB directive".
std::string ParseOptionWords(const std::vector<std::string>& words, const std::string& loc, SubmitOptions& opts,
                             size_t* stop) {
  const bool directive = !loc.empty();
  const std::string where = directive ? " in #MLSUB directive" : "";
  size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--" || w.size() < 2 || w[0] != '-') break;
    const SubmitOptionDef* def = nullptr;
    std::optional<std::string> value;
    std::string shown;
    if (w[1] == '-') {
      auto eq = w.find('=');
      std::string name = w.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq != std::string::npos) value = w.substr(eq + 1);
      def = FindLong(name);
      shown = "--" + name;
    } else {
      def = FindShort(w[1]);
      if (w.size() > 2) value = w.substr(2);
      shown = w.substr(0, 2);
    }
    if (!def) return "unknown option '" + (w[1] == '-' ? shown : w) + "'" + where;
    if (directive && !def->in_directives) return "option " + shown + " is not allowed" + where;
    if (def->value_name.empty()) {
      if (value) return "option " + shown + " takes no value" + where;
    } else if (!value) {
      if (i + 1 >= words.size()) return "option " + shown + " needs a value (" + def->value_name + ")" + where;
      value = words[++i];
    }
    if (std::string err = def->apply(opts, value.value_or("")); !err.empty())
      return "--" + def->long_names[0] + where + ": " + err;
    if (directive) opts.origin[def->long_names[0]] = loc;
  }
  *stop = i;
  return "";
}

}  // namespace

const std::vector<SubmitOptionDef>& SubmitOptionTable() {
  static const std::vector<SubmitOptionDef> table = MakeTable();
  return table;
}

Parsed<SubmitArgs> ParseSubmitArgs(const std::vector<std::string>& args) {
  Parsed<SubmitArgs> out;
  SubmitArgs r;
  size_t stop = 0;
  if (std::string err = ParseOptionWords(args, "", r.options, &stop); !err.empty()) {
    out.error = err;
    return out;
  }
  if (stop < args.size() && args[stop] == "--") {
    r.has_command = true;
    r.command.assign(args.begin() + static_cast<long>(stop) + 1, args.end());
  } else {
    r.positionals.assign(args.begin() + static_cast<long>(stop), args.end());
  }
  out.value = std::move(r);
  return out;
}

Parsed<std::vector<std::string>> SplitDirectiveWords(const std::string& text) {
  Parsed<std::vector<std::string>> out;
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quote) {
      if (c == quote) quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) cur += text[++i];
      else cur += c;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
      continue;
    }
    if (c == '#' && !in_word) break;  // a comment to the end of the line
    in_word = true;
    if (c == '"' || c == '\'') quote = c;
    else if (c == '\\' && i + 1 < text.size()) cur += text[++i];
    else cur += c;
  }
  if (quote) {
    out.error = std::string("unterminated ") + quote + " quote";
    return out;
  }
  if (in_word) words.push_back(cur);
  out.value = std::move(words);
  return out;
}

Parsed<DirectiveResult> ParseDirectives(const std::string& script, const std::string& script_name) {
  Parsed<DirectiveResult> out;
  DirectiveResult r;
  std::istringstream in(script);
  std::string line;
  bool in_header = true;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string loc = script_name + ":" + std::to_string(lineno);
    if (lineno == 1 && line.rfind("#!", 0) == 0) continue;
    size_t first = line.find_first_not_of(" \t");
    bool directive = line.rfind("#MLSUB", 0) == 0 && (line.size() == 6 || std::isspace(static_cast<unsigned char>(line[6])));
    if (!directive) {
      if (first != std::string::npos && line[first] != '#') in_header = false;  // the first command
      continue;
    }
    if (!in_header) {
      r.warnings.push_back(loc + ": #MLSUB directive after the first command is ignored");
      continue;
    }
    auto words = SplitDirectiveWords(line.substr(6));
    if (!words) {
      out.error = loc + ": " + words.error + " in #MLSUB directive";
      return out;
    }
    SubmitOptions line_opts;
    size_t stop = 0;
    if (std::string err = ParseOptionWords(*words.value, loc, line_opts, &stop); !err.empty()) {
      out.error = loc + ": " + err;
      return out;
    }
    if (stop < words.value->size()) {
      out.error = loc + ": unexpected argument '" + (*words.value)[stop] + "' in #MLSUB directive (only options are allowed)";
      return out;
    }
    OverlayOptions(r.options, line_opts);
  }
  out.value = std::move(r);
  return out;
}

namespace {

template <typename T>
void Take(std::optional<T>& base, const std::optional<T>& top, const char* name, SubmitOptions& b,
          const SubmitOptions& t) {
  if (!top) return;
  base = top;
  auto it = t.origin.find(name);
  if (it != t.origin.end()) b.origin[name] = it->second;
  else b.origin.erase(name);
}

}  // namespace

void OverlayOptions(SubmitOptions& b, const SubmitOptions& t) {
  Take(b.job_name, t.job_name, "job-name", b, t);
  if (t.ntasks) b.task_range = t.task_range;  // -n sets the size and the range together
  Take(b.ntasks, t.ntasks, "ntasks", b, t);
  Take(b.cpu_millis_per_task, t.cpu_millis_per_task, "cpus-per-task", b, t);
  Take(b.memory_bytes_per_task, t.memory_bytes_per_task, "mem-per-task", b, t);
  Take(b.gpus_per_task, t.gpus_per_task, "gpus-per-task", b, t);
  Take(b.gpu_types, t.gpu_types, "gpu-types", b, t);
  Take(b.fallback, t.fallback, "fallback", b, t);
  Take(b.time_limit_s, t.time_limit_s, "time", b, t);
  Take(b.partition, t.partition, "partition", b, t);
  Take(b.account, t.account, "account", b, t);
  Take(b.qos, t.qos, "qos", b, t);
  Take(b.output, t.output, "output", b, t);
  Take(b.error, t.error, "error", b, t);
  Take(b.chdir, t.chdir, "chdir", b, t);
  Take(b.export_env, t.export_env, "export", b, t);
  Take(b.hold, t.hold, "hold", b, t);
  Take(b.topology, t.topology, "topology", b, t);
  Take(b.nice, t.nice, "nice", b, t);
  Take(b.dependency, t.dependency, "dependency", b, t);
  Take(b.array, t.array, "array", b, t);
  Take(b.spot, t.spot, "spot", b, t);
  Take(b.checkpoint_interval_s, t.checkpoint_interval_s, "checkpoint-interval", b, t);
  Take(b.data_region, t.data_region, "data-region", b, t);
  Take(b.data_bytes, t.data_bytes, "data-size", b, t);
  Take(b.region_strict, t.region_strict, "region-strict", b, t);
  Take(b.container_image, t.container_image, "container-image", b, t);
  Take(b.container_mounts, t.container_mounts, "container-mounts", b, t);
  Take(b.container_workdir, t.container_workdir, "container-workdir", b, t);
  Take(b.container_env, t.container_env, "container-env", b, t);
  Take(b.container_writable, t.container_writable, "container-writable", b, t);
  Take(b.container_auth_file, t.container_auth_file, "container-auth-file", b, t);
  Take(b.container_mount_home, t.container_mount_home, "container-mount-home", b, t);
  Take(b.wrap, t.wrap, "wrap", b, t);
  Take(b.server, t.server, "server", b, t);
  Take(b.submission_key, t.submission_key, "submission-key", b, t);
  b.parsable = b.parsable || t.parsable;
  b.help = b.help || t.help;
}

std::string SubmitOptionsHelp() {
  std::string out;
  for (const auto& d : SubmitOptionTable()) {
    std::string names = d.short_name ? std::string("-") + d.short_name + ", " : "    ";
    for (size_t i = 0; i < d.long_names.size(); ++i) names += (i ? ", --" : "--") + d.long_names[i];
    if (!d.value_name.empty()) names += " " + d.value_name;
    if (names.size() < 30) names.resize(30, ' ');
    else names += "  ";
    out += "  " + names + d.help + "\n";
  }
  return out;
}

}  // namespace mlsched::cli
