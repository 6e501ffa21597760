#include "agentd/outbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "agentd/safe_files.h"

namespace mlsched::agent {

namespace {

constexpr const char* kSuffix = ".report";

std::string FileName(uint64_t seq) { return std::to_string(seq) + kSuffix; }

/// The seq of a "<digits>.report" name, or 0.
uint64_t SeqOf(const std::string& name) {
  const size_t n = name.size(), s = std::strlen(kSuffix);
  if (n <= s || n > s + 20 || name.compare(n - s, s, kSuffix) != 0) return 0;
  uint64_t seq = 0;
  for (size_t i = 0; i < n - s; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    const uint64_t digit = static_cast<uint64_t>(name[i] - '0');
    if (seq > (UINT64_MAX - digit) / 10) return 0;
    seq = seq * 10 + digit;
  }
  return seq;
}

/// Opens `dir` (never through a symlink) for *at() calls; -1 with errno on failure.
int OpenDir(const std::string& dir) { return ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

}  // namespace

Outbox::Outbox(std::string dir) : dir_(std::move(dir)) {}

bool Outbox::IsReliable(const v1::AgentMessage& msg) {
  return msg.msg_case() == v1::AgentMessage::kTaskExited || msg.msg_case() == v1::AgentMessage::kEviction ||
         msg.msg_case() == v1::AgentMessage::kTaskStarted;
}

size_t Outbox::Load() {
  if (dir_.empty()) return 0;
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::runtime_error("cannot create outbox directory " + dir_ + ": " + std::strerror(errno));
  const int fd = OpenDir(dir_);
  if (fd < 0) throw std::runtime_error("cannot open outbox directory " + dir_ + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & 022) != 0) {
    ::close(fd);
    throw std::runtime_error("outbox directory " + dir_ + " must be owned by the agent's user and writable only by it");
  }
  ::fchmod(fd, 0700);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    throw std::runtime_error("cannot read outbox directory " + dir_ + ": " + std::strerror(errno));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  ::closedir(d);
  std::lock_guard lk(mu_);
  for (const auto& name : names) {
    const uint64_t seq = SeqOf(name);
    std::string bytes, err;
    v1::AgentMessage msg;
    if (seq == 0) {
      err = "not a report file name";
    } else if (err = ReadRegularFileAt(dir_, name, kMaxReportFileBytes, &bytes); err.empty()) {
      if (!msg.ParseFromString(bytes) || !IsReliable(msg) || msg.seq() != seq) err = "not a reliable report with seq " + std::to_string(seq);
    }
    if (!err.empty()) {
      spdlog::warn("outbox: removing {}/{}: {}", dir_, name, err);
      if (const int dfd = OpenDir(dir_); dfd >= 0) {
        ::unlinkat(dfd, name.c_str(), 0);
        ::close(dfd);
      }
      continue;
    }
    unacked_[seq] = std::move(msg);
    next_seq_ = std::max(next_seq_, seq + 1);
  }
  if (!unacked_.empty())
    spdlog::info("outbox: {} report(s) a previous agent left unacknowledged will be sent again", unacked_.size());
  return unacked_.size();
}

bool Outbox::WriteFile(const v1::AgentMessage& msg) {
  if (dir_.empty()) return true;
  if (unacked_.size() > kMaxUnackedReports) {
    spdlog::error("outbox: more than {} unacknowledged reports; report {} is kept in memory only", kMaxUnackedReports, msg.seq());
    return false;
  }
  const std::string name = FileName(msg.seq()), tmp = name + ".tmp";
  const std::string bytes = msg.SerializeAsString();
  const int dfd = OpenDir(dir_);
  if (dfd < 0) {
    spdlog::error("outbox: cannot open {}: {}; report {} is kept in memory only", dir_, std::strerror(errno), msg.seq());
    return false;
  }
  bool ok = false;
  ::unlinkat(dfd, tmp.c_str(), 0);
  if (const int f = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600); f >= 0) {
    ok = ::write(f, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::fsync(f) == 0;
    ::close(f);
    ok = ok && ::renameat(dfd, tmp.c_str(), dfd, name.c_str()) == 0 && ::fsync(dfd) == 0;
  }
  if (!ok) {
    spdlog::error("outbox: cannot write {}/{}: {}; report {} is kept in memory only", dir_, name, std::strerror(errno), msg.seq());
    ::unlinkat(dfd, tmp.c_str(), 0);
  }
  ::close(dfd);
  return ok;
}

void Outbox::RemoveFile(uint64_t seq) {
  if (dir_.empty()) return;
  if (const int dfd = OpenDir(dir_); dfd >= 0) {
    ::unlinkat(dfd, FileName(seq).c_str(), 0);
    ::close(dfd);
  }
}

void Outbox::SetOnline(bool online) {
  std::lock_guard lk(mu_);
  online_ = online;
  // Offline, nothing transient is worth keeping; online, the reliable reports are queued afresh
  // from unacked_ (anything not acknowledged may not have reached schedd's disk).
  queue_.clear();
  if (online) {
    interrupted_ = false;
    for (const auto& [seq, msg] : unacked_) queue_.push_back(msg);
  }
  cv_.notify_all();
}

void Outbox::Push(v1::AgentMessage msg) {
  std::lock_guard lk(mu_);
  if (IsReliable(msg)) {
    msg.set_seq(next_seq_++);
    WriteFile(msg);  // under the lock: files appear in seq order
    unacked_[msg.seq()] = msg;
  } else if (!online_) {
    return;
  }
  if (online_) queue_.push_back(std::move(msg));  // offline: queued by the next SetOnline(true)
  cv_.notify_all();
}

std::optional<v1::AgentMessage> Outbox::Pop(Clock::time_point until) {
  std::unique_lock lk(mu_);
  cv_.wait_until(lk, until, [&] { return interrupted_ || woken_ || !queue_.empty(); });
  woken_ = false;
  if (interrupted_ || queue_.empty()) return std::nullopt;
  v1::AgentMessage m = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return m;
}

void Outbox::Interrupt() {
  std::lock_guard lk(mu_);
  interrupted_ = true;
  cv_.notify_all();
}

void Outbox::Wake() {
  std::lock_guard lk(mu_);
  woken_ = true;
  cv_.notify_all();
}

void Outbox::Ack(uint64_t seq) {
  std::lock_guard lk(mu_);
  for (auto it = unacked_.begin(); it != unacked_.end() && it->first <= seq;) {
    RemoveFile(it->first);
    it = unacked_.erase(it);
  }
  cv_.notify_all();
}

size_t Outbox::Size() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

size_t Outbox::Unsent() const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (const auto& m : queue_) n += IsReliable(m) ? 1 : 0;
  return n;
}

size_t Outbox::Unacked() const {
  std::lock_guard lk(mu_);
  return unacked_.size();
}

bool Outbox::WaitSettled(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return queue_.empty() && unacked_.empty(); });
}

}  // namespace mlsched::agent
