#include "agentd/launch_plan.h"
#include "agentd/safe_files.h"

#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <system_error>

#include "agentd/container_bundle.h"
#include "agentd/patterns.h"
#include "common/container_ref.h"
#include "agentd/task_env.h"

namespace mlsched::agent {
namespace fs = std::filesystem;
namespace {

struct UserInfo {
  bool found = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
};

UserInfo LookupUser(const std::string& name) {
  UserInfo u;
  if (name.empty()) return u;
  std::vector<char> buf(16384);
  struct passwd pw{};
  struct passwd* res = nullptr;
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &res) == 0 && res) {
    u.found = true;
    u.uid = pw.pw_uid;
    u.gid = pw.pw_gid;
    u.home = pw.pw_dir ? pw.pw_dir : "";
  }
  return u;
}

std::vector<gid_t> SupplementaryGroups(const std::string& user, gid_t gid) {
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  while (getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) groups.resize(static_cast<size_t>(n) + 16);
  groups.resize(static_cast<size_t>(n));
  return groups;
}

// The executable and argv of every rank: argv (a path, or a bare name the task searches on its
// PATH) or the batch script. Nothing is looked up here: the child does it as the task's user.
std::string ResolveCommand(const v1::JobSpec& spec, const std::string& workdir, const std::string& path_list,
                           const std::string& dir, LaunchRequest* req) {
  if (spec.argv_size() > 0) {
    const std::string& cmd = spec.argv(0);
    if (cmd.empty()) return "the job's command (argv[0]) is empty";
    if (cmd.find('/') != std::string::npos) {
      fs::path p(cmd);
      if (p.is_relative()) p = fs::path(workdir) / p;
      req->executable = p.lexically_normal().string();
    } else {
      req->executable = cmd;
      req->search_path = path_list;
    }
    req->argv.assign(spec.argv().begin(), spec.argv().end());
    return "";
  }
  if (spec.script().empty()) return "the job has neither a command (argv) nor a batch script";
  std::string script_path = dir + "/script";
  if (spec.script().rfind("#!", 0) == 0) {
    req->executable = script_path;
    req->argv = {script_path};
  } else {
    req->executable = "/bin/sh";
    req->argv = {"/bin/sh", script_path};
  }
  return "";
}

// Who the tasks run as; fills the request template's user switch. Jobs of uid 0 run only with
// --allow-root-jobs; an agent that is not root runs only its own uid's jobs, unless --single-user
// (then every job runs as the agent's user).
std::string ResolveUser(const v1::Prepare& p, const PlanContext& ctx, UserInfo* user, LaunchRequest* tmpl) {
  *user = LookupUser(p.user());
  if (p.uid() == 0 && !ctx.allow_root_jobs)
    return "jobs of uid 0 (root) do not run on node " + ctx.node +
           ": its agentd was started without --allow-root-jobs (root jobs are off by default, as Slurm's "
           "DisableRootJobs)";
  if (!ctx.agent_is_root) {
    if (p.uid() != ctx.agent_uid && !ctx.single_user)
      return "job of uid " + std::to_string(p.uid()) + " refused: agentd on node " + ctx.node + " runs as uid " +
             std::to_string(ctx.agent_uid) + ", not root, so it could only run the job as uid " +
             std::to_string(ctx.agent_uid) + " (start it as root, or with --single-user for a one-user cluster)";
    return "";
  }
  if (p.uid() == 0) return "";
  if (!user->found) return "user '" + p.user() + "' (uid " + std::to_string(p.uid()) + ") does not exist on this node";
  if (user->uid != p.uid())
    return "user '" + p.user() + "' has uid " + std::to_string(user->uid) + " on this node, not " + std::to_string(p.uid());
  tmpl->switch_user = true;
  tmpl->uid = p.uid();
  tmpl->gid = p.gid();
  tmpl->groups = SupplementaryGroups(p.user(), p.gid());
  return "";
}

std::string StatusFileName(int32_t rank) { return "status-" + std::to_string(rank) + ".json"; }

// Builds one rank's launch request from the template (user, workdir already set).
std::string PlanRank(const v1::Prepare& p, const v1::TaskLaunch& t, const PlanContext& ctx, const std::string& dir,
                     const std::string& home, const LaunchRequest& tmpl, PlannedRank* r) {
  const v1::JobSpec& spec = p.spec();
  TaskEnvInput in;
  in.spec_env = {spec.env().begin(), spec.env().end()};
  in.scheduler_env = {p.env().begin(), p.env().end()};
  in.job_id = p.job_id();
  in.attempt = p.attempt();
  in.rank = t.rank();
  in.local_rank = t.local_rank();
  in.world_size = p.world_size();
  in.local_world_size = p.local_world_size();
  in.master_addr = p.master_addr();  // MASTER_PORT comes with the commit (AddCommitEnvironment)
  in.gpu_indices.assign(t.gpu_indices().begin(), t.gpu_indices().end());
  in.node = ctx.node;
  in.status_file = dir + "/" + StatusFileName(t.rank());
  in.stop_reason_file = StopReasonPath(dir);
  in.rendezvous_token = p.rendezvous_token();
  in.user = p.user();
  in.home = home;
  if (const auto& a = spec.array_index(); a.array_job_id() != 0) {
    in.array_job_id = a.array_job_id();
    in.array_task_id = a.task_id();
    in.array_task_count = a.task_count();
    in.array_task_min = a.task_min();
    in.array_task_max = a.task_max();
  }
  auto env = BuildTaskEnvironment(in);

  r->rank = t.rank();
  r->gpus = in.gpu_indices;
  r->request = tmpl;
  if (auto err = ResolveCommand(spec, tmpl.workdir, env["PATH"], dir, &r->request); !err.empty()) return err;
  PatternValues values{p.job_id(), t.rank(), p.user(), spec.name(), ctx.node, spec.array_index().array_job_id(),
                       spec.array_index().task_id()};
  auto out_path = ResolveOutputPath(spec.stdout_pattern(), "mlsched-%j.out", values, tmpl.workdir);
  if (!out_path) return "stdout: " + out_path.error;
  auto err_path =
      spec.stderr_pattern().empty() ? out_path : ResolveOutputPath(spec.stderr_pattern(), "", values, tmpl.workdir);
  if (!err_path) return "stderr: " + err_path.error;
  r->request.stdout_path = *out_path.value;
  r->request.stderr_path = *err_path.value;
  r->request.env = ToEnvStrings(env);
  r->request.umask = spec.has_umask() ? static_cast<mode_t>(spec.umask() & 0777) : 022;
  r->request.limits.memory_bytes = spec.memory_bytes_per_task();
  r->request.limits.cpu_millis = spec.cpu_millis_per_task();
  r->request.limits.pids_max = ctx.task_pids_max;
  std::set<int32_t> own(r->gpus.begin(), r->gpus.end());
  for (size_t i = 0; i < ctx.gpu_devices.size(); ++i)
    if (!own.count(static_cast<int32_t>(i))) r->request.limits.deny_devices.push_back(ctx.gpu_devices[i]);
  return "";
}

// A rank's container: the jobs directory read-only and the attempt directory (script, status
// files) at their own paths, the user's
// home unless --no-container-mount-home, the user's mounts (opened as the user at launch), the
// job's /dev/shm on this node and the rank's GPUs. Mount sources and targets were checked by
// schedd (CheckContainerMount); they are checked again here, the agent trusting no message.
std::shared_ptr<ContainerLaunch> PlanContainer(const v1::ContainerSpec& spec, const std::string& dir,
                                               const std::string& home, const std::vector<int32_t>& gpus,
                                               const PlanContext& ctx) {
  auto c = std::make_shared<ContainerLaunch>();
  c->image_ref = spec.image();
  c->workdir = spec.workdir();
  c->keep_env.assign(spec.env().begin(), spec.env().end());
  c->writable = spec.writable();
  // The agent's jobs directory read-only (the stop-reason file a task reads on SIGTERM lives there,
  // written after the start; mode 0711, so nothing is listed), then the attempt's own directory.
  const std::string jobs = dir.substr(0, dir.rfind('/'));
  c->binds.push_back({jobs, jobs, true, false});
  c->binds.push_back({dir, dir, false, false});
  if ((!spec.has_mount_home() || spec.mount_home()) && !home.empty() && home != "/" &&
      CheckContainerPath("home", home).empty() && CheckMountTarget(home).empty())
    c->binds.push_back({home, home, false, true, true});
  for (const auto& m : spec.mounts()) c->binds.push_back({m.source(), m.target(), m.read_only(), true});
  c->shm_dir = dir + ".shm";
  for (int32_t g : gpus)
    if (g >= 0 && static_cast<size_t>(g) < ctx.gpu_devices.size()) c->gpu_devices.push_back(ctx.gpu_devices[g]);
  return c;
}

}  // namespace


bool PlannedAttempt::HasRank0() const {
  for (const auto& r : ranks)
    if (r.rank == 0) return true;
  return false;
}

std::string StatusFilePath(const std::string& work_dir, const TaskKey& key) {
  return (fs::path(work_dir) / "jobs" / key.Attempt().ToString() / StatusFileName(key.rank)).string();
}

Parsed<PlannedAttempt> PlanAttempt(const v1::Prepare& p, const PlanContext& ctx) {
  Parsed<PlannedAttempt> out;
  auto fail = [&](std::string msg) {
    out.error = std::move(msg);
    return out;
  };
  const v1::JobSpec& spec = p.spec();
  if (spec.has_container()) {  // schedd checked these; the agent trusts no message
    ImageRef ref;
    if (auto err = ParseImageRef(spec.container().image(), &ref); !err.empty()) return fail("container image: " + err);
    std::vector<ContainerMountSpec> before;
    for (const auto& m : spec.container().mounts()) {
      ContainerMountSpec mount{m.source(), m.target(), m.read_only()};
      if (auto err = CheckContainerMount(mount, before); !err.empty()) return fail("container mount: " + err);
      before.push_back(mount);
    }
    if (!spec.container().workdir().empty())
      if (auto err = CheckContainerPath("container workdir", spec.container().workdir()); !err.empty()) return fail(err);
    if (!spec.container().auth_file().empty())
      if (auto err = CheckContainerPath("container auth file", spec.container().auth_file()); !err.empty()) return fail(err);
  }
  if (p.tasks_size() == 0) return fail("prepare for job " + std::to_string(p.job_id()) + " lists no tasks");
  // A job in an image never runs its command on the host instead (schedd sends such jobs only to
  // nodes that registered a runtime; this is the agent's own guard).
  if (spec.has_container() && !ctx.containers)
    return fail("job runs in container image '" + spec.container().image().substr(0, 1024) + "', but agentd on node " +
                ctx.node + " runs no containers (" + ctx.container_refusal + ")");
  PlannedAttempt plan;
  plan.key = {p.job_id(), p.attempt()};
  plan.dir = (fs::path(ctx.work_dir) / "jobs" / plan.key.ToString()).string();
  LaunchRequest tmpl;
  UserInfo user;
  if (auto err = ResolveUser(p, ctx, &user, &tmpl); !err.empty()) return fail(err);
  plan.chown_dir = tmpl.switch_user;
  plan.uid = tmpl.uid;
  plan.gid = tmpl.gid;

  // Only its form is checked: whether it exists is the task's to find out, as its user (launcher.h).
  std::string workdir = spec.workdir().empty() ? (user.home.empty() ? "/" : user.home) : spec.workdir();
  if (fs::path(workdir).is_relative()) return fail("working directory '" + workdir + "' is not an absolute path");
  tmpl.workdir = workdir;

  std::set<int32_t> seen_gpus, seen_ranks;
  for (const auto& t : p.tasks()) {
    if (!seen_ranks.insert(t.rank()).second) return fail("rank " + std::to_string(t.rank()) + " listed twice");
    for (int32_t g : t.gpu_indices()) {
      if (g < 0 || g >= ctx.gpu_count)
        return fail("rank " + std::to_string(t.rank()) + ": GPU index " + std::to_string(g) + " does not exist (node has " +
                    std::to_string(ctx.gpu_count) + " GPUs)");
      if (!seen_gpus.insert(g).second) return fail("GPU index " + std::to_string(g) + " assigned to two ranks");
    }
  }

  for (const auto& t : p.tasks()) {
    PlannedRank r;
    if (auto err = PlanRank(p, t, ctx, plan.dir, user.home, tmpl, &r); !err.empty()) return fail(err);
    if (spec.has_container()) r.request.container = PlanContainer(spec.container(), plan.dir, user.home, r.gpus, ctx);
    plan.ranks.push_back(std::move(r));
  }
  if (spec.argv_size() == 0) plan.script = spec.script();
  out.value = std::move(plan);
  return out;
}

std::string WriteAttemptFiles(const PlannedAttempt& plan) {
  return CreateAttemptDir(plan.dir, plan.script, plan.chown_dir, plan.uid, plan.gid);
}

namespace {
constexpr std::string_view kStopReasonSuffix = ".stop-reason";
}  // namespace

std::string StopReasonPath(const std::string& attempt_dir) { return attempt_dir + std::string(kStopReasonSuffix); }

std::string WriteStopReason(const std::string& attempt_dir, const std::string& reason) {
  if (reason.empty() || reason.size() > kMaxStopReasonBytes ||
      reason.find_first_not_of("abcdefghijklmnopqrstuvwxyz-") != std::string::npos)
    return "bad stop reason (1-" + std::to_string(kMaxStopReasonBytes) + " characters of [a-z-])";
  const std::string path = StopReasonPath(attempt_dir), tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  const std::string text = reason + "\n";
  const bool ok = ::fchmod(fd, 0644) == 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot write " + path + ": " + err;
  }
  return "";
}

void RemoveAttemptFiles(const std::string& dir) {
  const bool reason_file = dir.size() > kStopReasonSuffix.size() && dir.ends_with(kStopReasonSuffix);
  if (!reason_file) {
    struct stat st{};
    if (::lstat((dir + ".shm").c_str(), &st) == 0) RemoveJobShm(dir + ".shm");  // a container job's /dev/shm
    if (std::string err = RemoveTree(dir); !err.empty()) spdlog::warn("cannot remove {}: {}", dir, err);
  }
  const std::string path = reason_file ? dir : StopReasonPath(dir);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) spdlog::warn("cannot remove {}: {}", path, std::strerror(errno));
}

}  // namespace mlsched::agent
