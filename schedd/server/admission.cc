#include "schedd/server/admission.h"

#include <algorithm>
#include <cctype>
#include <utility>

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
  for (const auto& g : spec.gpu_types())
    if (size(g) > l.max_field_bytes) return TooBig("a gpu type", size(g), l.max_field_bytes, "max_field_bytes");
  if (spec.fallback_size() > l.max_list_items)
    return TooBig("fallback tiers", spec.fallback_size(), l.max_list_items, "max_list_items", "items");
  for (const auto& f : spec.fallback())
    if (size(f.accelerator()) > l.max_field_bytes)
      return TooBig("a fallback accelerator", size(f.accelerator()), l.max_field_bytes, "max_field_bytes");
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
                                     {"isolation", &reg.isolation()}})
    if (value->size() > L::kMaxLabel)
      return std::string("node ") + name + ": " + field + " has " + std::to_string(value->size()) +
             " bytes; the limit is " + std::to_string(L::kMaxLabel);
  const auto& cap = reg.capacity();
  if (cap.cpu_millis() < 0 || cap.memory_bytes() < 0) return "node " + name + ": negative capacity";
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

}  // namespace mlsched::server
