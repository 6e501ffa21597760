// PolicyReader: [provisioning.POOL] (elastic capacity through resume/suspend programs, Slurm power
// saving's ResumeProgram / SuspendProgram) into core::ProvisioningPolicy. The node shape uses
// agentd's flags' words: cpus, memory, gpus = "TYPE:N", region, zone, domain, features.
#include <charconv>

#include "common/units.h"
#include "schedd/core/provisioning.h"
#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {
namespace {

constexpr int64_t kMaxShapeCpuMillis = int64_t{4096} * 1000;  // 4096 cores per node
constexpr int64_t kMaxShapeMemory = int64_t{64} << 40;         // 64 TiB per node
constexpr int64_t kMaxShapeGpus = 64;                          // GPUs per node (one device word)
constexpr size_t kMaxProgramPath = 4096;                       // bytes of a program path (PATH_MAX)
constexpr core::Duration kMaxResumeTimeout = 86400;            // a node has at most a day to register

}  // namespace

void PolicyReader::ReadProvisioning(const toml::table& t, core::PolicySet& p) {
  for (const auto& [pool, node] : t) {
    const std::string name(pool.str()), ctx = "[provisioning." + name + "]";
    const std::optional<core::Pool> parsed = core::ParsePool(name);
    if (!parsed) {
      Error(node.source(), "unknown pool '" + name + "' in [provisioning] (expected \"on-demand\", \"spot\" or \"reserved\")");
      continue;
    }
    const toml::table* pt = node.as_table();
    if (!pt) {
      Error(node.source(), ctx + " must be a table");
      continue;
    }
    p.provisioning.push_back(ReadProvisioningPool(*pt, *parsed, ctx));
  }
}

core::ProvisioningPolicy PolicyReader::ReadProvisioningPool(const toml::table& t, core::Pool pool, const std::string& ctx) {
  core::ProvisioningPolicy c;
  c.pool = pool;
  c.shape.pool = pool;
  CheckKeys(t, {"resume_program", "suspend_program", "max_nodes", "idle_time", "resume_timeout", "max_cost_per_hour",
                "cpus", "memory", "gpus", "region", "zone", "domain", "features", "root_jobs", "containers"}, ctx);
  KeepLines(t, {"max_nodes", "max_cost_per_hour"}, c.source);
  for (const char* key : {"resume_program", "suspend_program"}) {
    std::string& out = key[0] == 'r' ? c.resume_program : c.suspend_program;
    Str(t, key, out, ctx);
    const toml::source_region& where = t.get(key) ? t.get(key)->source() : t.source();
    if (out.empty()) Error(where, ctx + ": '" + key + "' (an absolute path) is required");
    else if (out[0] != '/') Error(where, ctx + ": '" + key + "' must be an absolute path, got \"" + out + "\"");
    else if (out.size() > kMaxProgramPath || out.find('\0') != std::string::npos)
      Error(where, ctx + ": '" + key + "' is longer than " + std::to_string(kMaxProgramPath) + " bytes or holds a NUL");
  }
  Int32(t, "max_nodes", c.max_nodes, 1, ctx);
  if (!t.get("max_nodes")) Error(t.source(), ctx + ": 'max_nodes' (1.." + std::to_string(core::kMaxProvisionedNodes) + ") is required");
  else if (c.max_nodes > core::kMaxProvisionedNodes)
    Error(t.get("max_nodes")->source(), ctx + ": 'max_nodes' must be at most " + std::to_string(core::kMaxProvisionedNodes));
  Dur(t, "idle_time", c.idle_time, ctx);
  Dur(t, "resume_timeout", c.resume_timeout, ctx);
  if (c.idle_time < 1) Error(t.get("idle_time")->source(), ctx + ": 'idle_time' must be at least 1 second");
  if (c.resume_timeout < 1 || c.resume_timeout > kMaxResumeTimeout)
    Error(t.get("resume_timeout")->source(),
          ctx + ": 'resume_timeout' must be 1.." + std::to_string(kMaxResumeTimeout) + " seconds");
  Num(t, "max_cost_per_hour", c.max_cost_per_hour, ctx);
  ReadShape(t, ctx, c.shape);
  // Whether the nodes it creates run root's jobs (their agentd --allow-root-jobs): the planner
  // must know, since root's jobs need such nodes.
  bool root_jobs = false;
  Bool(t, "root_jobs", root_jobs, ctx);
  if (root_jobs) c.shape.features.push_back(core::kRootJobsFeature);
  // Whether they run jobs in images (their agentd has runc, skopeo and umoci).
  bool containers = false;
  Bool(t, "containers", containers, ctx);
  if (containers) c.shape.features.push_back(core::kContainersFeature);
  return c;
}

void PolicyReader::ReadShape(const toml::table& t, const std::string& ctx, core::Node& shape) {
  auto text = [&](const char* key, auto parse, int64_t max, int64_t& out) {
    const toml::node* n = t.get(key);
    if (!n) return Error(t.source(), ctx + ": '" + key + "' (the node shape) is required");
    std::string s;
    if (auto i = n->value_exact<int64_t>()) s = std::to_string(*i);
    else Str(t, key, s, ctx);
    if (s.empty()) return;
    const Parsed<int64_t> v = parse(s);
    if (!v) return Error(n->source(), ctx + ": '" + key + "': " + v.error);
    if (*v.value <= 0 || *v.value > max)
      return Error(n->source(), ctx + ": '" + key + "' must be above 0 and at most " + std::to_string(max));
    out = *v.value;
  };
  text("cpus", ParseCpus, kMaxShapeCpuMillis, shape.capacity.cpu_millis);
  text("memory", ParseMemory, kMaxShapeMemory, shape.capacity.memory_bytes);
  std::string gpus;
  Str(t, "gpus", gpus, ctx);
  if (!gpus.empty() && gpus != "none") {
    const size_t colon = gpus.rfind(':');
    int64_t count = 0;
    const char* end = gpus.data() + gpus.size();
    const bool number = colon != std::string::npos &&
                        std::from_chars(gpus.data() + colon + 1, end, count).ptr == end;
    if (!number || colon == 0 || count < 1 || count > kMaxShapeGpus)
      Error(t.get("gpus")->source(), ctx + ": 'gpus' must be \"TYPE:N\" with 1 <= N <= " +
                                         std::to_string(kMaxShapeGpus) + " (or \"none\"), got \"" + gpus + "\"");
    else
      shape.capacity.gpus[gpus.substr(0, colon)] = count;
  }
  Str(t, "region", shape.region, ctx);
  Str(t, "zone", shape.zone, ctx);
  Str(t, "domain", shape.domain, ctx);
  StrList(t, "features", shape.features, ctx);
}

void PolicyReader::CheckProvisioning(const toml::table& root, const core::PolicySet& p) {
  for (const core::ProvisioningPolicy& c : p.provisioning) {
    if (c.max_cost_per_hour <= 0 || core::NodeCostPerHour(c.shape, p) > 0) continue;
    const toml::node* n = root.at_path(std::string("provisioning.") + core::PoolName(c.pool) + ".max_cost_per_hour").node();
    Error(n ? n->source() : root.source(),
          std::string("[provisioning.") + core::PoolName(c.pool) + "]: 'max_cost_per_hour' needs prices: add [pricing." +
              core::PoolName(c.pool) + "] with cpu_hour or gpu_hour for its node shape");
  }
}

}  // namespace mlsched::policy
