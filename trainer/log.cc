#include "trainer/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace mltrain {
namespace {

std::atomic<int> g_rank{-1};

void Write(const char* level, const std::string& message) {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string line = stamp;
  int rank = g_rank.load();
  if (rank >= 0) line += " [rank " + std::to_string(rank) + "]";
  line += " ";
  line += level;
  line += " ";
  line += message;
  line += "\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace

void SetLogRank(int rank) { g_rank.store(rank); }
void LogInfo(const std::string& message) { Write("INFO", message); }
void LogWarn(const std::string& message) { Write("WARN", message); }
void LogError(const std::string& message) { Write("ERROR", message); }

}  // namespace mltrain
