// Helpers shared by the libFuzzer targets: input as text, a scratch file for readers that take a
// path, and FUZZ_CHECK for properties (a failed check aborts, which libFuzzer reports as a crash).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace mlsched::fuzz {

/// The fuzzer's bytes as a string (embedded NULs kept).
inline std::string Text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

/// Aborts with a message when a property of the code under test does not hold.
#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

/// A file of this process in /dev/shm (else $TMPDIR, else /tmp), rewritten for each input and
/// removed at exit: for parsers whose only entry point takes a path.
class ScratchFile {
 public:
  explicit ScratchFile(std::string_view name) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp && *tmp ? tmp : "/tmp";
    path_ = dir + "/mlsched-fuzz-" + std::to_string(::getpid()) + "-" + std::string(name);
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  /// Replaces the file's contents with `bytes`; returns the path.
  const std::string& Write(std::string_view bytes) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
      std::perror(path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace mlsched::fuzz
