// Line-by-line reading of plain or gzip-compressed text files (zlib reads both transparently).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlsched::sim {

/// Reads a text file line by line, plain or .gz. Throws TraceError when the file cannot be opened
/// or a read fails. Lines are returned without the trailing "\n" / "\r\n".
class LineReader {
 public:
  explicit LineReader(const std::string& path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// Next line into `line`; false at end of file.
  bool Next(std::string& line);
  /// 1-based number of the line last returned.
  long line_number() const { return line_number_; }
  /// "PATH:LINE" of the line last returned.
  std::string Origin() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* file_ = nullptr;  // gzFile
  long line_number_ = 0;
  std::vector<char> buffer_;
};

/// Splits on one separator character; empty fields are kept ("a,,b" -> {"a","","b"}).
std::vector<std::string_view> SplitFields(std::string_view line, char separator);
/// Splits on runs of blanks (spaces and tabs); no empty fields.
std::vector<std::string_view> SplitBlanks(std::string_view line);
/// Strict integer parse of the whole field; false on junk, overflow or empty.
bool ParseInt(std::string_view field, int64_t& out);
/// Strict floating-point parse of the whole field (e.g. "2240194.0"); false on junk or empty.
bool ParseDouble(std::string_view field, double& out);
/// File name without directories ("a/b/c.swf.gz" -> "c.swf.gz").
std::string BaseName(const std::string& path);

}  // namespace mlsched::sim
