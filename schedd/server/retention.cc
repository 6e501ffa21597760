#include "schedd/server/retention.h"

#include <spdlog/spdlog.h>

namespace mlsched::server {

RetentionPurger::RetentionPurger(SqliteStore& store, int64_t retention_s, std::chrono::seconds every,
                                 std::function<int64_t()> now)
    : store_(store), retention_s_(retention_s), every_(every), now_(std::move(now)) {
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stop_) {
      lk.unlock();
      try {
        if (int64_t n = PurgeOnce(); n > 0)
          spdlog::info("accounting retention: {} finished job(s) older than {} s deleted with their attempts and events", n,
                       retention_s_);
      } catch (const std::exception& e) {
        spdlog::warn("accounting retention: {}", e.what());
      }
      lk.lock();
      cv_.wait_for(lk, every_, [this] { return stop_; });
    }
  });
}

RetentionPurger::~RetentionPurger() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t RetentionPurger::PurgeOnce() {
  const int64_t cutoff = now_() - retention_s_;
  int64_t total = 0;
  while (total < kMaxPerPass) {
    {
      std::lock_guard lk(mu_);
      if (stop_) break;
    }
    const int64_t n = store_.PurgeFinished(cutoff, kBatch).get();
    total += n;
    if (n < kBatch) break;
  }
  return total;
}

}  // namespace mlsched::server
