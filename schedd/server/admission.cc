#include "schedd/server/admission.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <utility>

#include "common/container_ref.h"
#include "common/safe_text.h"
#include "common/units.h"

namespace mlsched::server {

namespace {

std::string TooBig(const std::string& what, int64_t size, int64_t limit, const char* key, const char* unit = "bytes") {
  return what + " is " + std::to_string(size) + " " + unit + "; the limit is " + std::to_string(limit) +
         " (policy [limits] " + key + ")";
}

}  // namespace

std::string CheckSpecLimits(const v1::JobSpec& spec, const core::InputLimits& l) {
  auto size = [](const std::string& s) { return static_cast<int64_t>(s.size()); };
  if (size(spec.name()) > l.max_name_bytes) return TooBig("job name", size(spec.name()), l.max_name_bytes, "max_name_bytes");
  if (size(spec.script()) > l.max_script_bytes)
    return TooBig("batch script", size(spec.script()), l.max_script_bytes, "max_script_bytes");
  if (spec.env_size() > l.max_env_vars) return TooBig("environment", spec.env_size(), l.max_env_vars, "max_env_vars", "variables");
  int64_t env = 0;
  for (const auto& [k, v] : spec.env()) env += size(k) + size(v) + 2;
  if (env > l.max_env_bytes) return TooBig("environment", env, l.max_env_bytes, "max_env_bytes");
  if (spec.argv_size() > l.max_argv) return TooBig("argv", spec.argv_size(), l.max_argv, "max_argv", "arguments");
  int64_t argv = 0;
  for (const auto& a : spec.argv()) argv += size(a) + 1;
  if (argv > l.max_argv_bytes) return TooBig("argv", argv, l.max_argv_bytes, "max_argv_bytes");
  const std::pair<const char*, const std::string*> fields[] = {
      {"workdir", &spec.workdir()},          {"stdout pattern", &spec.stdout_pattern()},
      {"stderr pattern", &spec.stderr_pattern()}, {"partition", &spec.partition()},
      {"account", &spec.account()},          {"qos", &spec.qos()},
      {"topology", &spec.topology()},        {"dependency", &spec.dependency()},
      {"array", &spec.array()},              {"spot", &spec.spot()},
      {"data region", &spec.data_region()}};
  for (const auto& [what, value] : fields)
    if (size(*value) > l.max_field_bytes) return TooBig(what, size(*value), l.max_field_bytes, "max_field_bytes");
  if (spec.gpu_types_size() > l.max_list_items)
    return TooBig("gpu types", spec.gpu_types_size(), l.max_list_items, "max_list_items", "items");
  const auto max_type = static_cast<int64_t>(kMaxGpuTypeBytes);
  auto type_too_long = [&](const char* what, const std::string& name) {
    return what + std::string(" is ") + std::to_string(name.size()) + " bytes; a GPU type name has at most " +
           std::to_string(max_type);
  };
  for (const auto& g : spec.gpu_types())
    if (size(g) > max_type) return type_too_long("a gpu type", g);
  if (spec.fallback_size() > l.max_list_items)
    return TooBig("fallback tiers", spec.fallback_size(), l.max_list_items, "max_list_items", "items");
  for (const auto& f : spec.fallback())
    if (size(f.accelerator()) > max_type) return type_too_long("a fallback accelerator", f.accelerator());
  return "";
}

size_t FirstNonPrintable(const std::string& text) {
  const auto* b = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return i;
      ++i;
      continue;
    }
    // UTF-8 (RFC 3629): the sequence length from the lead byte, continuation bytes 10xxxxxx, no
    // overlong forms, no surrogates, nothing above U+10FFFF.
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (len == 0 || i + len > n) return i;
    uint32_t cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t k = 1; k < len; ++k) {
      if ((b[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (b[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return i;
    if (cp >= 0x80 && cp <= 0x9f) return i;  // C1 controls (0xC2 0x9B is CSI)
    i += len;
  }
  return std::string::npos;
}

std::string CheckSpecText(const v1::JobSpec& spec) {
  auto bad = [](const std::string& what, const std::string& text) -> std::string {
    const size_t at = FirstNonPrintable(text);
    if (at == std::string::npos) return "";
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned char>(text[at]));
    return what + " holds a control character or invalid UTF-8 (byte " + hex + " at offset " + std::to_string(at) +
           "); it may hold printable characters only";
  };
  const std::pair<const char*, const std::string*> fields[] = {
      {"job name", &spec.name()},         {"workdir", &spec.workdir()},
      {"stdout pattern", &spec.stdout_pattern()}, {"stderr pattern", &spec.stderr_pattern()},
      {"partition", &spec.partition()},   {"account", &spec.account()},
      {"qos", &spec.qos()},               {"topology", &spec.topology()},
      {"dependency", &spec.dependency()}, {"array", &spec.array()},
      {"spot", &spec.spot()},             {"data region", &spec.data_region()}};
  for (const auto& [what, value] : fields)
    if (std::string e = bad(what, *value); !e.empty()) return e;
  for (const auto& g : spec.gpu_types())
    if (std::string e = bad("a gpu type", g); !e.empty()) return e;
  if (spec.has_container()) {  // shown by mladmin show job and mlq --json (JSON needs valid UTF-8)
    const auto& c = spec.container();
    if (std::string e = bad("the container image", c.image()); !e.empty()) return e;
    if (std::string e = bad("the container workdir", c.workdir()); !e.empty()) return e;
    if (std::string e = bad("the container auth file", c.auth_file()); !e.empty()) return e;
    for (const auto& m : c.mounts())
      for (const std::string* path : {&m.source(), &m.target()})
        if (std::string e = bad("a container mount", *path); !e.empty()) return e;
  }
  for (const auto& f : spec.fallback())
    if (std::string e = bad("a fallback accelerator", f.accelerator()); !e.empty()) return e;
  for (const auto& [k, v] : spec.env()) {
    if (k.empty() || k.find('=') != std::string::npos) return "environment variable name '" + k + "' is empty or holds '='";
    if (std::string e = bad("an environment variable name", k); !e.empty()) return e;
  }
  return "";
}

std::string CheckSpecValues(const v1::JobSpec& spec) {
  if (spec.ntasks() < 1) return "ntasks must be >= 1 (got " + std::to_string(spec.ntasks()) + ")";
  if (spec.ntasks() > 100000) return "ntasks must be <= 100000 (got " + std::to_string(spec.ntasks()) + ")";
  if (spec.min_tasks() < 0 || spec.task_step() < 0)
    return "min_tasks and task_step must be >= 0 (got " + std::to_string(spec.min_tasks()) + ", " +
           std::to_string(spec.task_step()) + ")";
  if (spec.min_tasks() == 0 && spec.task_step() > 1)
    return "task_step " + std::to_string(spec.task_step()) + " needs a task range (min_tasks)";
  if (spec.cpu_millis_per_task() < 0) return "cpus per task must be >= 0";
  if (spec.memory_bytes_per_task() < 0) return "memory per task must be >= 0";
  if (spec.gpus_per_task() < 0 || spec.gpus_per_task() > 1024)
    return "gpus per task must be in [0, 1024] (got " + std::to_string(spec.gpus_per_task()) + ")";
  if (spec.time_limit_s() < 0) return "time limit must be >= 0";
  if (spec.argv().empty() && spec.script().empty()) return "job has no command: give a script, --wrap CMD or -- CMD ARGS";
  if (!spec.workdir().empty() && spec.workdir()[0] != '/')
    return "workdir must be an absolute path (got '" + spec.workdir() + "')";
  if (spec.checkpoint_interval_s() < 0) return "checkpoint interval must be >= 0 seconds";
  if (spec.data_bytes() < 0) return "data size must be >= 0 bytes";
  if (spec.has_container()) return CheckContainerSpec(spec.container());
  return "";
}

std::string CheckContainerSpec(const v1::ContainerSpec& c) {
  ImageRef ref;
  if (std::string err = ParseImageRef(c.image(), &ref); !err.empty()) return "container image: " + err;
  if (ref.Canonical() != c.image())
    return "container image '" + c.image() + "' is not in canonical form; send '" + ref.Canonical() + "'";
  if (c.mounts_size() > static_cast<int>(kMaxContainerMounts))
    return "container: " + std::to_string(c.mounts_size()) + " mounts; the limit is " + std::to_string(kMaxContainerMounts);
  std::vector<ContainerMountSpec> mounts;
  for (const auto& m : c.mounts()) {
    ContainerMountSpec mount{m.source(), m.target(), m.read_only()};
    if (std::string err = CheckContainerMount(mount, mounts); !err.empty()) return "container " + err;
    mounts.push_back(std::move(mount));
  }
  if (!c.workdir().empty())
    if (std::string err = CheckContainerPath("container workdir", c.workdir()); !err.empty()) return err;
  if (c.env_size() > static_cast<int>(kMaxContainerEnvNames))
    return "container: " + std::to_string(c.env_size()) + " environment names; the limit is " +
           std::to_string(kMaxContainerEnvNames);
  for (const auto& name : c.env())
    if (std::string err = CheckEnvName(name); !err.empty()) return "container env: " + err;
  if (!c.auth_file().empty())
    if (std::string err = CheckContainerPath("container auth file", c.auth_file()); !err.empty()) return err;
  return "";
}

std::string CheckStoredJob(const JobRow& row, const std::string& user_of_uid, const core::InputLimits& limits) {
  v1::JobSpec spec;
  if (!spec.ParseFromString(row.spec)) return "its spec does not parse";
  if (row.user != user_of_uid)
    return "it names user '" + row.user + "' with uid " + std::to_string(row.uid) + ", which is '" + user_of_uid +
           "' on this host";
  if (!core::ParseJobState(row.state)) return "unknown state '" + row.state + "'";
  if (row.attempt < 0 || row.requeue_count < 0 || row.preempt_count < 0 || row.evictions < 0)
    return "negative attempt or counters";
  if (row.image_digest.size() > 80 || !IsSafeText(row.image_digest)) return "an image digest over 80 bytes or with control bytes";
  return CheckStoredSpec(spec, limits);
}

std::string CheckStoredSpec(const v1::JobSpec& spec, const core::InputLimits& limits) {
  for (auto check : {CheckSpecValues(spec), CheckSpecText(spec), CheckSpecLimits(spec, limits)})
    if (!check.empty()) return "its spec: " + check;
  return "";
}

std::string CheckGpuTypesKnown(const v1::JobSpec& spec, const std::vector<core::Node>& nodes) {
  if (nodes.empty()) return "";  // nothing registered yet: CheckJobFeasible skips too
  std::set<std::string> known;
  for (const auto& n : nodes)
    for (const auto& [type, count] : n.capacity.gpus)
      if (count > 0) known.insert(type);
  auto unknown = [&](const std::string& type) {
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    return "unknown GPU type '" + type + "': no node or provisioning shape has it (" +
           (list.empty() ? std::string("no GPU in this cluster") : "types: " + list) + ")";
  };
  for (const auto& g : spec.gpu_types())
    if (!known.count(g)) return unknown(g);
  for (const auto& f : spec.fallback())
    if (f.accelerator() != "cpu" && !known.count(f.accelerator())) return unknown(f.accelerator());
  return "";
}

bool SubmitRateLimiter::Take(const std::string& user, int64_t now, const core::InputLimits& l) {
  if (l.submit_rate_per_user <= 0) return true;
  auto [it, fresh] = buckets_.try_emplace(user);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = l.submit_burst_per_user;
    b.last = now;
  }
  if (now > b.last) {
    b.tokens = std::min<double>(l.submit_burst_per_user, b.tokens + static_cast<double>(now - b.last) * l.submit_rate_per_user);
    b.last = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

}  // namespace mlsched::server

namespace mlsched::server {

std::string CheckRegistration(const v1::RegisterNode& reg) {
  using L = RegistrationLimits;
  const std::string& name = reg.name();
  if (name.empty() || name.size() > L::kMaxNodeName)
    return "node name has " + std::to_string(name.size()) + " bytes; it must have 1 to " +
           std::to_string(L::kMaxNodeName);
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      return "node name may hold only letters, digits, '.', '-' and '_'";
  for (const auto& [field, value] : {std::pair<const char*, const std::string*>{"region", &reg.region()},
                                     {"zone", &reg.zone()},
                                     {"domain", &reg.domain()},
                                     {"address", &reg.address()},
                                     {"version", &reg.version()},
                                     {"isolation", &reg.isolation()},
                                     {"container runtime", &reg.container_runtime()}}) {
    if (value->size() > L::kMaxLabel)
      return std::string("node ") + name + ": " + field + " has " + std::to_string(value->size()) +
             " bytes; the limit is " + std::to_string(L::kMaxLabel);
    if (FirstNonPrintable(*value) != std::string::npos)
      return std::string("node ") + name + ": " + field + " holds a control character or invalid UTF-8";
  }
  const auto& cap = reg.capacity();
  if (cap.cpu_millis() < 0 || cap.memory_bytes() < 0) return "node " + name + ": negative capacity";
  for (const auto& g : cap.gpus())
    if (g.type().size() > kMaxGpuTypeBytes || FirstNonPrintable(g.type()) != std::string::npos)
      return "node " + name + ": GPU type names have at most " + std::to_string(kMaxGpuTypeBytes) +
             " printable bytes";
  if (cap.gpus_size() > L::kMaxGpuTypes)
    return "node " + name + ": " + std::to_string(cap.gpus_size()) + " GPU types; the limit is " +
           std::to_string(L::kMaxGpuTypes);
  for (const auto& g : cap.gpus())
    if (g.type().size() > L::kMaxLabel || g.count() < 0 || g.count() > L::kMaxGpusPerType)
      return "node " + name + ": GPU entry out of range (type at most " + std::to_string(L::kMaxLabel) +
             " bytes, count 0 to " + std::to_string(L::kMaxGpusPerType) + ")";
  if (reg.cutoff_timeout_s() < 0 || reg.cutoff_timeout_s() > L::kMaxCutoffSeconds)
    return "node " + name + ": cutoff_timeout_s " + std::to_string(reg.cutoff_timeout_s()) + " is out of range 0 to " +
           std::to_string(L::kMaxCutoffSeconds);
  if (reg.running_size() > L::kMaxRunningTasks)
    return "node " + name + ": " + std::to_string(reg.running_size()) + " running tasks; the limit is " +
           std::to_string(L::kMaxRunningTasks);
  return "";
}

std::string CheckInteractiveSpec(v1::JobSpec& spec, const core::InteractivePolicy& policy,
                                 const core::PartitionPolicy& partition) {
  if (!spec.interactive()) return "";
  auto at = [&](const char* key) {
    const std::string& line = policy.source.Of(key);
    return line.empty() ? std::string(" (policy [interactive] ") + key + ")" : " (policy " + line + " [interactive] " + key + ")";
  };
  if (!spec.array().empty()) return "an interactive job (mlrun, mlalloc) cannot be a job array";
  if (spec.min_tasks() > 0) return "an interactive job (mlrun, mlalloc) has one size: elastic ranges are for batch jobs";
  if (!policy.partitions.empty() &&
      std::find(policy.partitions.begin(), policy.partitions.end(), partition.name) == policy.partitions.end()) {
    std::string list;
    for (const auto& p : policy.partitions) list += (list.empty() ? "" : ", ") + p;
    return "partition '" + partition.name + "' takes no interactive jobs; these do: " + list + at("partitions");
  }
  if (policy.max_time <= 0) return "";
  if (spec.time_limit_s() == 0) spec.set_time_limit_s(std::min(partition.default_time_limit, policy.max_time));
  if (spec.time_limit_s() > policy.max_time)
    return "time limit " + FormatDuration(spec.time_limit_s()) + " exceeds the maximum of interactive jobs, " +
           FormatDuration(policy.max_time) + at("max_time");
  return "";
}

}  // namespace mlsched::server
