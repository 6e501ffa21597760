// The highest controller epoch this agent has seen (HA fencing), kept in <work_dir>/epoch so an
// agent restart still refuses a deposed leader. Written like the outbox's reports: a temporary
// file opened through the directory's fd with O_NOFOLLOW, fsync'd, renamed, directory fsync'd.
#pragma once

#include <cstdint>
#include <string>

namespace mlsched::agent {

/// Largest epoch file read (bytes): one decimal number and a newline.
inline constexpr size_t kMaxEpochFileBytes = 32;
/// Name of the file in the work directory.
inline constexpr const char* kEpochFileName = "epoch";

class EpochFile {
 public:
  /// `dir`: the agent's work directory (it must exist); "" keeps nothing on disk.
  explicit EpochFile(std::string dir);
  /// The stored epoch; 0 when there is none. A file that is not a regular file of at most
  /// kMaxEpochFileBytes holding one non-negative decimal number is logged and counts as 0.
  int64_t Load() const;
  /// Stores `epoch` durably. Returns "" or the error naming the path.
  std::string Store(int64_t epoch) const;

 private:
  std::string dir_;
};

}  // namespace mlsched::agent
