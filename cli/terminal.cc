#include "cli/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace mlsched::cli {

RawTerminal::RawTerminal(int fd) : fd_(fd) {
  if (!isatty(fd) || tcgetattr(fd, &saved_) != 0) return;
  struct termios raw = saved_;
  cfmakeraw(&raw);
  active_ = tcsetattr(fd, TCSADRAIN, &raw) == 0;
}

void RawTerminal::Restore() {
  if (!active_) return;
  active_ = false;
  tcsetattr(fd_, TCSADRAIN, &saved_);
}

bool WindowSizeOf(int fd, uint32_t* rows, uint32_t* cols) {
  struct winsize ws{};
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return false;
  *rows = ws.ws_row;
  *cols = ws.ws_col;
  return true;
}

std::string LineLabeler::Label(std::string_view data) {
  std::string out;
  for (char c : data) {
    held_ += c;
    if (c == '\n' || held_.size() >= kMaxHeldLineBytes) {
      out += label_;
      out += held_;
      held_.clear();
    }
  }
  return out;
}

std::string LineLabeler::Flush() {
  if (held_.empty()) return "";
  std::string out = label_ + held_;
  held_.clear();
  return out;
}

}  // namespace mlsched::cli
