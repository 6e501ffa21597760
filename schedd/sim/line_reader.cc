#include "schedd/sim/line_reader.h"

#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "schedd/sim/trace.h"

namespace mlsched::sim {

LineReader::LineReader(const std::string& path) : path_(path), buffer_(1 << 16) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw TraceError(path + ": cannot open: " + std::strerror(errno ? errno : ENOENT));
  }
  gzbuffer(f, 1 << 17);
  file_ = f;
}

LineReader::~LineReader() {
  if (file_ != nullptr) gzclose(static_cast<gzFile>(file_));
}

bool LineReader::Next(std::string& line) {
  auto* f = static_cast<gzFile>(file_);
  line.clear();
  bool got_any = false;
  while (gzgets(f, buffer_.data(), static_cast<int>(buffer_.size())) != nullptr) {
    got_any = true;
    size_t n = std::strlen(buffer_.data());
    line.append(buffer_.data(), n);
    if (n > 0 && buffer_[n - 1] == '\n') break;  // else: a line longer than the buffer
  }
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_BUF_ERROR) {
    throw TraceError(path_ + ":" + std::to_string(line_number_ + 1) + ": read error: " + msg);
  }
  if (!got_any) return false;
  ++line_number_;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return true;
}

std::string LineReader::Origin() const { return path_ + ":" + std::to_string(line_number_); }

std::vector<std::string_view> SplitFields(std::string_view line, char separator) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = line.find(separator, start);
    if (pos == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, pos - start));
    start = pos + 1;
  }
}

std::vector<std::string_view> SplitBlanks(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool ParseInt(std::string_view field, int64_t& out) {
  if (field.empty()) return false;
  const char* first = field.data();
  if (*first == '+') ++first;
  auto [ptr, ec] = std::from_chars(first, field.data() + field.size(), out);
  return ec == std::errc() && ptr == field.data() + field.size();
}

bool ParseDouble(std::string_view field, double& out) {
  if (field.empty()) return false;
  auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), out);
  return ec == std::errc() && ptr == field.data() + field.size();
}

std::string BaseName(const std::string& path) {
  size_t pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

}  // namespace mlsched::sim
