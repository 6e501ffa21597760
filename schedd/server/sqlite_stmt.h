// Internal to the SQLite store (store.cc, store_accounting.cc): error checks, statements kept
// compiled per connection, and the jobs table's columns. Not a public interface.
#pragma once

#include <sqlite3.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "schedd/server/store.h"

namespace mlsched::server::sqlite {

inline void Check(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    throw StoreError(std::string("sqlite: ") + what + ": " + sqlite3_errmsg(db));
}

inline void Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw StoreError(std::string("sqlite: ") + msg + " in: " + sql);
  }
}

// A prepared statement with RAII finalization and typed binding helpers.
// Prepared statements kept per connection and SQL literal (its address), so a hot statement is
// compiled once, not on every write: preparing took ~18% of schedd's CPU with 20,000 starts on
// 1,000 nodes (issue 30). A connection is used by one thread at a time; the map's own lock only
// guards lookups. A statement already in use (nested) gets a fresh one, finalized after use.
struct CachedStmt {
  sqlite3_stmt* st = nullptr;
  bool in_use = false;
};
inline std::mutex g_stmt_mu;
inline std::map<std::pair<sqlite3*, const char*>, CachedStmt> g_stmts;

// Finalizes the cached statements of `db`; before sqlite3_close.
inline void FinalizeCached(sqlite3* db) {
  std::lock_guard lk(g_stmt_mu);
  for (auto it = g_stmts.begin(); it != g_stmts.end();) {
    if (it->first.first == db) {
      sqlite3_finalize(it->second.st);
      it = g_stmts.erase(it);
    } else {
      ++it;
    }
  }
}

/// Stmt's second argument: keep the compiled statement for the next use. Only for SQL given as
/// a string literal: the cache is keyed by the text's address.
constexpr bool kCache = true;

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql, bool cache = false) : db_(db) {
    if (cache) {
      std::lock_guard lk(g_stmt_mu);
      auto& c = g_stmts[{db, sql}];
      if (c.st && !c.in_use) {
        c.in_use = true;
        cached_ = &c;
        st_ = c.st;
        return;
      }
      if (!c.st) {
        Check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c.st, nullptr), sql);
        c.in_use = true;
        cached_ = &c;
        st_ = c.st;
        return;
      }
    }
    Check(db, sqlite3_prepare_v2(db, sql, -1, &st_, nullptr), sql);  // nested use of the same SQL
  }
  ~Stmt() {
    if (!cached_) {
      sqlite3_finalize(st_);
      return;
    }
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
    std::lock_guard lk(g_stmt_mu);
    cached_->in_use = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& Bind(int i, int64_t v) { Check(db_, sqlite3_bind_int64(st_, i, v), "bind"); return *this; }
  Stmt& Bind(int i, const std::string& v) {
    Check(db_, sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), "bind");
    return *this;
  }
  Stmt& BindText(int i, const std::string& v) {
    Check(db_, sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), "bind");
    return *this;
  }
  Stmt& BindDouble(int i, double v) { Check(db_, sqlite3_bind_double(st_, i, v), "bind"); return *this; }
  /// Makes the statement ready to run again (bindings are replaced by the next Bind calls).
  void Reset() { sqlite3_reset(st_); }
  bool Step() {
    int rc = sqlite3_step(st_);
    Check(db_, rc, sqlite3_sql(st_));
    return rc == SQLITE_ROW;
  }
  int64_t Int(int c) { return sqlite3_column_int64(st_, c); }
  double Double(int c) { return sqlite3_column_double(st_, c); }
  std::string Blob(int c) {
    const void* p = sqlite3_column_blob(st_, c);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  CachedStmt* cached_ = nullptr;  // from g_stmts (std::map: its address is stable)
};

constexpr const char* kJobColumns =
    "id, spec, user, uid, gid, state, reason, submit_time, start_time, end_time, exit_code, attempt, "
    "requeue_count, placement, preempt_count, evictions, image_digest, usage";

inline JobRow ReadJob(Stmt& s) {
  JobRow r;
  r.id = s.Int(0);
  r.spec = s.Blob(1);
  r.user = s.Blob(2);
  r.uid = static_cast<uint32_t>(s.Int(3));
  r.gid = static_cast<uint32_t>(s.Int(4));
  r.state = s.Blob(5);
  r.reason = s.Blob(6);
  r.submit_time = s.Int(7);
  r.start_time = s.Int(8);
  r.end_time = s.Int(9);
  r.exit_code = static_cast<int32_t>(s.Int(10));
  r.attempt = static_cast<int32_t>(s.Int(11));
  r.requeue_count = static_cast<int32_t>(s.Int(12));
  r.placement = s.Blob(13);
  r.preempt_count = static_cast<int32_t>(s.Int(14));
  r.evictions = static_cast<int32_t>(s.Int(15));
  r.image_digest = s.Blob(16);
  r.usage = s.Blob(17);
  return r;
}

}  // namespace mlsched::server::sqlite
