#include "agentd/kmsg.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace mlsched::agent {

namespace {

bool Hex(std::string_view s, uint32_t max, uint32_t* out) {
  if (s.empty() || s.size() > 8) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return ec == std::errc() && p == s.data() + s.size() && *out <= max;
}

// The message of a /dev/kmsg record: what follows the first ';' when the prefix is
// "digits,digits,digits,...".
std::string_view MessageOf(std::string_view record) {
  const size_t semi = record.find(';');
  if (semi == std::string_view::npos || semi > 64) return record;
  const std::string_view prefix = record.substr(0, semi);
  if (prefix.empty() || prefix.find(',') == std::string_view::npos) return record;
  for (char c : prefix)
    if (!(c == ',' || c == '-' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z'))) return record;
  return record.substr(semi + 1);
}

}  // namespace

std::optional<XidEvent> ParseXid(std::string_view record) {
  const std::string_view msg = MessageOf(record);
  const size_t at = msg.find("NVRM: Xid (");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = msg.substr(at + 11);
  const size_t close = rest.find("): ");
  if (close == std::string_view::npos || close > 32) return std::nullopt;
  std::string_view addr = rest.substr(0, close);
  if (addr.substr(0, 4) == "PCI:") addr.remove_prefix(4);
  // DOMAIN:BUS:DEVICE, optionally .FUNCTION
  if (const size_t dot = addr.find('.'); dot != std::string_view::npos) addr = addr.substr(0, dot);
  const size_t c1 = addr.find(':'), c2 = addr.rfind(':');
  if (c1 == std::string_view::npos || c1 == c2) return std::nullopt;
  XidEvent e;
  if (!Hex(addr.substr(0, c1), 0xffffffffu, &e.domain) || !Hex(addr.substr(c1 + 1, c2 - c1 - 1), 0xff, &e.bus) ||
      !Hex(addr.substr(c2 + 1), 0x1f, &e.device))
    return std::nullopt;
  rest = rest.substr(close + 3);
  size_t digits = 0;
  while (digits < rest.size() && digits < 5 && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::from_chars(rest.data(), rest.data() + digits, e.code);
  rest = rest.substr(digits);
  // What the driver says after "pid=..., name=...," is the readable part; keep it short.
  if (const size_t name = rest.find("name="); name != std::string_view::npos) {
    const size_t comma = rest.find(", ", name);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);
  } else {
    while (!rest.empty() && (rest.front() == ',' || rest.front() == ' ')) rest.remove_prefix(1);
  }
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '.' || rest.back() == ' ')) rest.remove_suffix(1);
  e.text.assign(rest.substr(0, 160));
  for (char& c : e.text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return e;
}

const std::set<int32_t>& DefaultFatalXids() {
  static const std::set<int32_t> kFatal{48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140};
  return kFatal;
}

KmsgReader::~KmsgReader() {
  if (fd_ >= 0) close(fd_);
}

std::vector<std::string> KmsgReader::Read(std::string* error) {
  std::vector<std::string> out;
  if (fd_ < 0) {
    fd_ = open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd_ < 0) {
      *error = "cannot open " + path_ + ": " + std::strerror(errno);
      return out;
    }
    struct stat st {};
    device_ = fstat(fd_, &st) == 0 && S_ISCHR(st.st_mode);
  }
  // /dev/kmsg returns one record per read and needs a buffer as large as the longest (8 KiB in
  // the kernel's printk); a regular file is read in blocks and split into lines.
  char buf[8192];
  size_t bytes = 0;
  while (out.size() < kMaxRecordsPerRead && bytes < (size_t{16} << 20)) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) continue;  // overrun: the next read returns the oldest record kept
    if (n < 0 && errno == EAGAIN) break;    // nothing new
    if (n < 0) {
      *error = "cannot read " + path_ + ": " + std::strerror(errno);
      close(fd_);
      fd_ = -1;
      break;
    }
    if (n == 0) break;  // a regular file's end (for now)
    bytes += static_cast<size_t>(n);
    std::string_view chunk(buf, static_cast<size_t>(n));
    if (device_) {
      // The record's first line; the rest are " KEY=VALUE" continuation lines.
      out.emplace_back(chunk.substr(0, chunk.find('\n')));
      continue;
    }
    partial_.append(chunk);
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line(partial_.data() + start, nl - start);
      if (!line.empty() && line.front() != ' ') out.emplace_back(line);
    }
    partial_.erase(0, start);
    if (partial_.size() > 8192) partial_.clear();  // a line longer than any record: dropped
  }
  return out;
}

}  // namespace mlsched::agent
