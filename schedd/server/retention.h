// RetentionPurger: accounting retention (schedd --accounting-retention; slurmdbd's PurgeJobAfter).
// On a thread of its own, at start and then every `every`, it deletes from a SqliteStore (the
// state, or in HA mode this replica's history) the finished jobs that ended longer than
// `retention_s` ago, with their attempts, events and steps, in batches of kBatch jobs (each one
// transaction of the store's writer, so submissions keep flowing between them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "schedd/server/store.h"

namespace mlsched::server {

class RetentionPurger {
 public:
  /// `now` gives the wall clock (seconds since epoch); retention_s > 0.
  RetentionPurger(SqliteStore& store, int64_t retention_s, std::chrono::seconds every, std::function<int64_t()> now);
  ~RetentionPurger();
  RetentionPurger(const RetentionPurger&) = delete;
  RetentionPurger& operator=(const RetentionPurger&) = delete;
  /// One pass: batches until one deletes fewer than kBatch jobs or kMaxPerPass went; the jobs
  /// deleted. Throws the store's errors.
  int64_t PurgeOnce();

  static constexpr int64_t kBatch = 10000;
  static constexpr int64_t kMaxPerPass = 1000000;

 private:
  SqliteStore& store_;
  const int64_t retention_s_;
  const std::chrono::seconds every_;
  std::function<int64_t()> now_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlsched::server
