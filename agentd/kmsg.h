// The kernel log as agentd's health checks read it: records of /dev/kmsg (Documentation/ABI/
// testing/dev-kmsg: "PRIORITY,SEQ,TIMESTAMP_US,FLAGS;MESSAGE", continuation lines start with a
// space) and the NVIDIA driver's Xid reports among them ("NVRM: Xid (PCI:0000:3b:00): 79, pid=...,
// GPU has fallen off the bus."; NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace mlsched::agent {

/// One Xid report of the NVIDIA driver.
struct XidEvent {
  uint32_t domain = 0, bus = 0, device = 0;  // the GPU's PCI address (hexadecimal in the log)
  int32_t code = 0;                          // the Xid number
  std::string text;                          // the rest of the message, at most 160 bytes
};

/// The Xid report in one kernel log message (with or without /dev/kmsg's "PRI,SEQ,TS,FLAGS;"
/// prefix, as dmesg prints it); nullopt when it is none or malformed (numbers out of range).
std::optional<XidEvent> ParseXid(std::string_view message);

/// The Xids NVIDIA's catalog resolves by resetting the GPU, rebooting the node or contacting
/// support, rather than by restarting the application (agentd --health-fatal-xids overrides):
/// 48 double-bit ECC, 63/64 ECC page retirement or row remapping, 74 NVLink, 79 fallen off the bus,
/// 92 high single-bit ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP, 140 unrecovered ECC.
const std::set<int32_t>& DefaultFatalXids();

/// Reads kernel log records as they come, without blocking: /dev/kmsg (one record per read(); a
/// reader overrun by the ring buffer gets EPIPE and goes on with the oldest kept record) or a
/// regular file of such lines (tests, a saved log). The first Read() returns every record still
/// in the buffer (a GPU that failed before agentd started is found too).
class KmsgReader {
 public:
  /// Records read per Read(), at most; the rest waits for the next call.
  static constexpr size_t kMaxRecordsPerRead = 10000;
  explicit KmsgReader(std::string path) : path_(std::move(path)) {}
  ~KmsgReader();
  KmsgReader(const KmsgReader&) = delete;
  KmsgReader& operator=(const KmsgReader&) = delete;
  /// The new records' messages (continuation lines dropped); "" and `*error` set when the log
  /// cannot be opened or read (then tried again next time).
  std::vector<std::string> Read(std::string* error);

 private:
  std::string path_;
  int fd_ = -1;
  bool device_ = false;   // a character device (/dev/kmsg): one record per read
  std::string partial_;   // a regular file's unfinished last line
};

}  // namespace mlsched::agent
