#include "agentd/task_progress.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "agentd/safe_files.h"

namespace mlsched::agent {

std::optional<TaskProgress> ReadTaskProgress(const std::string& path) {
  std::filesystem::path p(path);
  std::string text;
  if (!ReadRegularFileAt(p.parent_path().string(), p.filename().string(), kMaxStatusFileBytes, &text).empty())
    return std::nullopt;
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  TaskProgress out;
  if (auto it = j.find("last_checkpoint_unix_s"); it != j.end() && it->is_number_integer())
    out.last_checkpoint_unix_s = it->get<int64_t>();
  if (auto it = j.find("step"); it != j.end() && it->is_number_integer()) out.step = it->get<int64_t>();
  if (auto it = j.find("compute_s"); it != j.end() && it->is_number()) {
    const double s = it->get<double>();
    if (s >= 0 && s < 1e12) out.compute_ms = static_cast<int64_t>(s * 1000);  // a year is 3e7 s
  }
  return out;
}

TaskProgressCache::TaskProgressCache(ListFn list, ReadFn read, std::chrono::milliseconds period)
    : list_(std::move(list)), read_(std::move(read)), period_(period) {}

TaskProgressCache::~TaskProgressCache() { Stop(); }

void TaskProgressCache::Start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      lk.unlock();
      RefreshOnce();
      lk.lock();
      cv_.wait_for(lk, period_, [&] { return stop_; });
    }
  });
}

void TaskProgressCache::Stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

TaskProgress TaskProgressCache::Get(const TaskKey& key) const {
  std::lock_guard lk(mu_);
  auto it = progress_.find(key);
  return it == progress_.end() ? TaskProgress{} : it->second;
}

void TaskProgressCache::RefreshOnce() {
  std::map<TaskKey, TaskProgress> fresh;
  for (const TaskKey& key : list_()) {
    auto read = read_(key);  // no lock held: this may take as long as the user's file makes it
    std::lock_guard lk(mu_);
    if (read) fresh[key] = *read;
    else if (auto it = progress_.find(key); it != progress_.end()) fresh[key] = it->second;  // keep the last good
  }
  std::lock_guard lk(mu_);
  progress_ = std::move(fresh);
}

}  // namespace mlsched::agent
