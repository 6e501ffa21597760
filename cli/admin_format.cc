#include "cli/admin_format.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/acct_format.h"
#include "cli/job_format.h"
#include "cli/job_states.h"
#include "common/safe_text.h"
#include "common/units.h"

namespace mlsched::cli {

namespace {

// Left-aligned columns separated by two spaces; trailing blanks trimmed. Cells (from schedd:
// hostile) are escaped for the terminal; widths count characters.
std::string RenderTable(std::vector<std::vector<std::string>> rows) {
  std::vector<size_t> width;
  for (auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (!IsSafeText(r[c])) r[c] = SafeText(r[c]);
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], Utf8Chars(r[c]));
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - Utf8Chars(r[c]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

std::string PoolName(v1::Pool pool) {
  switch (pool) {
    case v1::POOL_ON_DEMAND: return "on-demand";
    case v1::POOL_SPOT: return "spot";
    case v1::POOL_RESERVED: return "reserved";
    default: return "unknown";
  }
}

std::string GpuUsage(const v1::Resources& allocated, const v1::Resources& capacity) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;  // type -> (allocated, total)
  for (const auto& g : capacity.gpus()) by_type[g.type()].second += g.count();
  for (const auto& g : allocated.gpus()) by_type[g.type()].first += g.count();
  if (by_type.empty()) return "0/0";
  std::string out;
  for (const auto& [type, n] : by_type)
    out += (out.empty() ? "" : ",") + type + ":" + std::to_string(n.first) + "/" + std::to_string(n.second);
  return out;
}

// "runc 1.1.5+ds1", with the image cache once it holds something: "runc 1.1.5+ds1 (2 images, 1.2G)".
std::string RuntimeCell(const v1::NodeInfo& n) {
  if (n.container_runtime().empty()) return "-";
  if (n.image_cache_images() == 0) return n.container_runtime();
  return n.container_runtime() + " (" + std::to_string(n.image_cache_images()) +
         (n.image_cache_images() == 1 ? " image, " : " images, ") + FormatBytes(n.image_cache_bytes()) + ")";
}

std::string FormatNodeTable(const std::vector<v1::NodeInfo>& nodes) {
  std::vector<const v1::NodeInfo*> sorted;
  for (const auto& n : nodes) sorted.push_back(&n);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  std::vector<std::vector<std::string>> rows{
      {"NODE", "POOL", "STATE", "CPUS(A/T)", "MEM", "GPUS(A/T)", "DOMAIN", "ZONE", "REGION", "ISOLATION", "RUNTIME", "REJECTED", "REASON"}};
  for (const auto* n : sorted) {
    rows.push_back({n->name(), PoolName(n->pool()), n->state(),
                    FormatCores(n->allocated().cpu_millis()) + "/" + FormatCores(n->capacity().cpu_millis()),
                    FormatBytes(n->allocated().memory_bytes()) + "/" + FormatBytes(n->capacity().memory_bytes()),
                    GpuUsage(n->allocated(), n->capacity()), n->domain(), n->zone(), n->region(),
                    n->isolation().empty() ? "-" : n->isolation(),
                    RuntimeCell(*n), std::to_string(n->rejected_reports()),
                    SafeText(n->reason())});
  }
  return RenderTable(std::move(rows));
}

nlohmann::json NodeJson(const v1::NodeInfo& n) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_type;
  for (const auto& g : n.capacity().gpus()) by_type[g.type()].second += g.count();
  for (const auto& g : n.allocated().gpus()) by_type[g.type()].first += g.count();
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& [type, c] : by_type) gpus.push_back({{"type", type}, {"count", c.second}, {"allocated", c.first}});
  return nlohmann::json{
      {"name", n.name()},
      {"pool", PoolName(n.pool())},
      {"state", n.state()},
      {"reason", n.reason()},
      {"region", n.region()},
      {"zone", n.zone()},
      {"domain", n.domain()},
      {"address", n.address()},
      {"isolation", n.isolation()},
      {"agent_version", n.agent_version()},
      {"container_runtime", n.container_runtime()},
      {"image_cache_bytes", n.image_cache_bytes()},
      {"image_cache_images", n.image_cache_images()},
      {"rejected_reports", n.rejected_reports()},
      {"cutoff_timeout_s", n.cutoff_timeout_s()},
      {"cpu_millis", n.capacity().cpu_millis()},
      {"cpu_millis_allocated", n.allocated().cpu_millis()},
      {"memory_bytes", n.capacity().memory_bytes()},
      {"memory_bytes_allocated", n.allocated().memory_bytes()},
      {"gpus", gpus},
      {"last_heartbeat", n.last_heartbeat()},
      {"running_jobs", std::vector<int64_t>(n.running_jobs().begin(), n.running_jobs().end())},
      {"health_problems", std::vector<std::string>(n.health_problems().begin(), n.health_problems().end())},
      {"health_checked_at", n.health_checked_at()},
  };
}

namespace {

// Container=IMAGE Mounts=SRC:DST:ro,... Workdir=DIR Env=NAME,... Writable=no MountHome=yes
std::vector<std::pair<std::string, std::string>> ContainerLine(const v1::JobSpec& s, const std::string& digest) {
  if (!s.has_container()) return {{"Container", "-"}};
  const v1::ContainerSpec& c = s.container();
  std::string mounts;
  for (const auto& m : c.mounts())
    mounts += (mounts.empty() ? "" : ",") + m.source() + ":" + m.target() + (m.read_only() ? ":ro" : ":rw");
  return {{"Container", c.image()},
          {"Digest", digest.empty() ? "(not pulled yet)" : digest},
          {"Mounts", mounts.empty() ? "-" : mounts},
          {"Workdir", c.workdir().empty() ? "(image's)" : c.workdir()},
          {"Env", c.env().empty() ? "-" : Join(c.env(), ",")},
          {"Writable", c.writable() ? "yes" : "no"},
          {"MountHome", !c.has_mount_home() || c.mount_home() ? "yes" : "no"},
          {"AuthFile", c.auth_file().empty() ? "-" : c.auth_file()}};
}

}  // namespace

std::string FormatJobDetail(const v1::JobInfo& job, int64_t now) {
  const v1::JobSpec& s = job.spec();
  std::string env;
  for (const auto& [k, v] : std::map<std::string, std::string>(s.env().begin(), s.env().end()))
    env += (env.empty() ? "" : ",") + k + "=" + v;
  auto f = [&](char code) { return JobField(code, job, now); };
  // Every job has a command; none here means schedd withheld it (not the caller's job).
  const bool hidden = s.argv().empty() && s.script().empty();
  if (hidden) env = "(hidden: not your job)";
  std::vector<std::vector<std::pair<std::string, std::string>>> lines{
      {{"JobId", f('i')}, {"JobName", s.name()}},
      {{"UserId", job.user() + "(" + std::to_string(job.uid()) + ")"}, {"GroupId", std::to_string(job.gid())},
       {"Account", s.account()}, {"QOS", s.qos()}},
      {{"JobState", f('T')}, {"Reason", f('r')}, {"ExitCode", std::to_string(job.exit_code())}},
      {{"Priority", f('Q')}, {"Nice", f('y')}, {"Attempt", std::to_string(job.attempt())},
       {"Requeues", std::to_string(job.requeue_count())}, {"Hold", s.hold() ? "yes" : "no"}},
      {{"RunTime", f('M')}, {"TimeLimit", f('l')}},
      {{"SubmitTime", f('V')}, {"StartTime", FormatTimestamp(job.start_time())}, {"EndTime", f('e')},
       {"ExpectedStart", FormatTimestamp(job.expected_start())}},
      {{"Partition", s.partition()}, {"NodeList", f('N')}, {"NumNodes", f('D')}},
      {{"NumTasks", f('A')}, {"CPUsPerTask", FormatCores(s.cpu_millis_per_task())},
       {"MemPerTask", s.memory_bytes_per_task() > 0 ? FormatBytes(s.memory_bytes_per_task()) : "0"},
       {"GPUsPerTask", std::to_string(s.gpus_per_task())}, {"GPUTypes", Join(s.gpu_types(), ",")},
       {"Topology", s.topology().empty() ? "none" : s.topology()}},
      {{"WorkDir", s.workdir()}},
      ContainerLine(s, job.image_digest()),
      {{"StdOut", s.stdout_pattern()}, {"StdErr", s.stderr_pattern()}},
      {{"Command", hidden ? "(hidden: not your job)" : f('o')}},
      {{"Environment", env}},
  };
  std::string placement;
  for (const auto& t : job.tasks()) {
    std::string gpus;
    for (int g : t.gpu_indices()) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    placement += (placement.empty() ? "" : " ") + std::to_string(t.rank()) + ":" + t.node() + (gpus.empty() ? "" : "[" + gpus + "]");
  }
  lines.push_back({{"Tasks", placement}});
  // What it used so far (accounting: its agents' cgroup and NVML samples; sacct's names).
  if (job.has_usage() && job.usage().ranks() > 0) {
    std::vector<std::pair<std::string, std::string>> used;
    for (const char* field : {"TotalCPU", "CPUEff", "MaxRSS", "GPUHours", "GPUUtil", "EnergyKWh", "OOMKills"})
      used.emplace_back(field, AcctField(field, job, now));
    if (job.idle_gpus_since() > 0) used.emplace_back("IdleGPUs", f('X'));
    lines.push_back(used);
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "   ";
    for (size_t k = 0; k < lines[i].size(); ++k) {
      out += (k ? " " : "") + lines[i][k].first + "=";
      AppendSafeText(out, lines[i][k].second);
    }
    out += "\n";
  }
  if (!s.script().empty()) {  // the script's lines and indentation stay; every other control byte is escaped
    out += "   Script=\n";
    AppendSafeText(out, s.script(), TextStyle::kMultiline);
    if (s.script().back() != '\n') out += "\n";
  }
  return out;
}

nlohmann::json JobDetailJson(const v1::JobInfo& job, int64_t now) {
  const v1::JobSpec& s = job.spec();
  nlohmann::json j = JobJson(job, now);
  j["gid"] = job.gid();
  j["argv"] = std::vector<std::string>(s.argv().begin(), s.argv().end());
  j["script"] = s.script();
  j["env"] = std::map<std::string, std::string>(s.env().begin(), s.env().end());
  j["stdout"] = s.stdout_pattern();
  j["stderr"] = s.stderr_pattern();
  if (s.has_container()) {
    const v1::ContainerSpec& c = s.container();
    nlohmann::json mounts = nlohmann::json::array();
    for (const auto& m : c.mounts())
      mounts.push_back({{"source", m.source()}, {"target", m.target()}, {"read_only", m.read_only()}});
    j["container"] = {{"image", c.image()},
                      {"digest", job.image_digest()},
                      {"mounts", mounts},
                      {"workdir", c.workdir()},
                      {"env", std::vector<std::string>(c.env().begin(), c.env().end())},
                      {"writable", c.writable()},
                      {"auth_file", c.auth_file()},
                      {"mount_home", !c.has_mount_home() || c.mount_home()}};
  } else {
    j["container"] = nullptr;
  }
  nlohmann::json placement = nlohmann::json::array();
  for (const auto& t : job.tasks())
    placement.push_back({{"rank", t.rank()}, {"node", t.node()}, {"local_rank", t.local_rank()},
                         {"gpu_indices", std::vector<int>(t.gpu_indices().begin(), t.gpu_indices().end())}});
  j["placement"] = placement;
  return j;
}

namespace {

std::vector<const v1::HaMember*> SortedMembers(const v1::HaStatusResponse& resp) {
  std::vector<const v1::HaMember*> out;
  for (const auto& m : resp.members()) out.push_back(&m);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->address() < b->address(); });
  return out;
}

}  // namespace

std::string FormatHaStatus(const v1::HaStatusResponse& resp) {
  const std::string endpoints = Join(resp.etcd_endpoints(), ", ");
  const std::string no_leader = resp.mode() == "etcd" ? "none (election in progress)" : "-";
  const std::pair<const char*, std::string> head[] = {
      {"Mode:", resp.mode().empty() ? "-" : resp.mode()},
      {"Leader:", resp.leader().empty() ? no_leader : resp.leader()},
      {"Epoch:", std::to_string(resp.epoch())},
      {"Answered by:", resp.answered_by().empty() ? "-" : resp.answered_by()},
      {"Etcd endpoints:", endpoints.empty() ? "-" : endpoints},
      {"Revision:", std::to_string(resp.revision())},
      {"Fenced writes:", std::to_string(resp.fenced_writes())}};
  std::string out;
  for (const auto& [key, value] : head) {
    std::string line = key;
    line.resize(16, ' ');
    out += line;
    AppendSafeText(out, value);
    out += "\n";
  }
  if (resp.members_size() == 0) return out;
  std::vector<std::vector<std::string>> rows{{"ADDRESS", "ROLE", "REVISION", "LAG"}};
  for (const auto* m : SortedMembers(resp))
    rows.push_back({m->address(), m->role(), std::to_string(m->revision()), std::to_string(m->lag())});
  return out + "\n" + RenderTable(std::move(rows));
}

nlohmann::json HaStatusJson(const v1::HaStatusResponse& resp) {
  nlohmann::json members = nlohmann::json::array();
  for (const auto* m : SortedMembers(resp))
    members.push_back({{"address", m->address()}, {"role", m->role()}, {"revision", m->revision()}, {"lag", m->lag()}});
  return {{"mode", resp.mode()},
          {"leader", resp.leader()},
          {"epoch", resp.epoch()},
          {"answered_by", resp.answered_by()},
          {"etcd_endpoints", std::vector<std::string>(resp.etcd_endpoints().begin(), resp.etcd_endpoints().end())},
          {"revision", resp.revision()},
          {"fenced_writes", resp.fenced_writes()},
          {"members", members}};
}

}  // namespace mlsched::cli
