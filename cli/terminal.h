// The local terminal of an interactive session (mlrun --pty): raw mode and restoring it, the
// window's size, and srun's -l labels on output lines.
#pragma once

#include <termios.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace mlsched::cli {

/// Puts terminal `fd` in raw mode (cfmakeraw: no echo, no line editing, no signals from keys:
/// Ctrl-C, Ctrl-Z and Ctrl-\ travel to the remote terminal as bytes) and restores the saved mode
/// in Restore() or the destructor. Does nothing when `fd` is not a terminal.
class RawTerminal {
 public:
  explicit RawTerminal(int fd);
  ~RawTerminal() { Restore(); }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;
  /// Restores the saved mode (idempotent; async-signal-safe).
  void Restore();
  bool Active() const { return active_; }

 private:
  int fd_;
  bool active_ = false;
  struct termios saved_{};
};

/// The size of terminal `fd` in character cells; false when it is not a terminal.
bool WindowSizeOf(int fd, uint32_t* rows, uint32_t* cols);

/// Prefixes every line written through it with a label ("3: ", srun -l), across writes that cut
/// lines anywhere: a line is given out whole, once its newline came (so the lines of several
/// ranks interleave only between lines), or when kMaxHeldLineBytes of it are held.
class LineLabeler {
 public:
  static constexpr size_t kMaxHeldLineBytes = 64 * 1024;
  explicit LineLabeler(std::string label) : label_(std::move(label)) {}
  /// The complete lines `data` ends, each with the label before it.
  std::string Label(std::string_view data);
  /// What is held of an unfinished line, labelled ("" when none): at the end of the output.
  std::string Flush();

 private:
  std::string label_;
  std::string held_;  // the current line so far
};

}  // namespace mlsched::cli
