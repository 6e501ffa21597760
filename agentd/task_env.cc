#include "agentd/task_env.h"

namespace mlsched::agent {

std::map<std::string, std::string> BuildTaskEnvironment(const TaskEnvInput& in) {
  std::map<std::string, std::string> env;
  env["PATH"] = kDefaultTaskPath;
  if (!in.user.empty()) {
    env["USER"] = in.user;
    env["LOGNAME"] = in.user;
  }
  if (!in.home.empty()) env["HOME"] = in.home;
  for (const auto& [k, v] : in.spec_env) env[k] = v;
  for (const auto& [k, v] : in.scheduler_env) env[k] = v;

  std::string devices;
  for (size_t i = 0; i < in.gpu_indices.size(); ++i) {
    if (i) devices += ',';
    devices += std::to_string(in.gpu_indices[i]);
  }
  env["RANK"] = std::to_string(in.rank);
  env["WORLD_SIZE"] = std::to_string(in.world_size);
  env["LOCAL_RANK"] = std::to_string(in.local_rank);
  env["LOCAL_WORLD_SIZE"] = std::to_string(in.local_world_size);
  env["MASTER_ADDR"] = in.master_addr;
  if (in.master_port > 0) env["MASTER_PORT"] = std::to_string(in.master_port);
  else env.erase("MASTER_PORT");
  env.erase(kRendezvousFdVar);
  env["CUDA_VISIBLE_DEVICES"] = devices;
  env["MLSCHED_JOB_ID"] = std::to_string(in.job_id);
  env["MLSCHED_TASK_ID"] = std::to_string(in.rank);
  env["MLSCHED_ATTEMPT"] = std::to_string(in.attempt);
  env["MLSCHED_NODE"] = in.node;
  env["MLSCHED_STATUS_FILE"] = in.status_file;
  if (!in.stop_reason_file.empty()) env["MLSCHED_STOP_REASON_FILE"] = in.stop_reason_file;
  if (in.rendezvous_token.empty()) env.erase("MLSCHED_RENDEZVOUS_TOKEN");
  else env["MLSCHED_RENDEZVOUS_TOKEN"] = in.rendezvous_token;
  if (in.array_job_id != 0) {
    for (const char* prefix : {"MLSCHED_ARRAY_", "SLURM_ARRAY_"}) {
      const std::string p = prefix;
      env[p + "JOB_ID"] = std::to_string(in.array_job_id);
      env[p + "TASK_ID"] = std::to_string(in.array_task_id);
      env[p + "TASK_COUNT"] = std::to_string(in.array_task_count);
      env[p + "TASK_MIN"] = std::to_string(in.array_task_min);
      env[p + "TASK_MAX"] = std::to_string(in.array_task_max);
    }
  }
  return env;
}

void AddCommitEnvironment(std::vector<std::string>* env, int32_t master_port, int rendezvous_fd) {
  const std::string port_key = "MASTER_PORT=", fd_key = std::string(kRendezvousFdVar) + "=";
  std::erase_if(*env, [&](const std::string& kv) { return kv.rfind(port_key, 0) == 0 || kv.rfind(fd_key, 0) == 0; });
  if (master_port > 0 && master_port <= 65535) env->push_back(port_key + std::to_string(master_port));
  if (rendezvous_fd >= 0) env->push_back(fd_key + std::to_string(rendezvous_fd));
}

std::vector<std::string> ToEnvStrings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos) continue;
    if (v.find('\0') != std::string::npos) continue;
    out.push_back(k + "=" + v);
  }
  return out;
}

}  // namespace mlsched::agent
