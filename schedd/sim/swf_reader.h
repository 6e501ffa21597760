// Reader of the Standard Workload Format (SWF) of the Parallel Workloads Archive
// (Feitelson et al., https://www.cs.huji.ac.il/labs/parallel/workload/swf.html).
#pragma once

#include <string>

#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// Largest machine (and so job) size accepted, in processors: about a billion, so that the
/// node's millicores (x1000) and memory (1 GiB per processor) fit in 64 bits. A larger header
/// value or --processors is a TraceError; a larger job is a malformed record.
inline constexpr int64_t kMaxSwfProcessors = int64_t{1} << 30;

/// SWF-specific choices.
struct SwfOptions {
  /// Machine size in processors; 0 = from the header (MaxProcs, else MaxNodes).
  int64_t processors = 0;
};

/// Reads an SWF file (plain or .gz). Mapping (see README.md): job size = requested processors
/// (field 8), or allocated processors (field 5) when field 8 <= 0; run time (field 4) is clipped to
/// the requested time (field 9), which becomes the time limit; user (12) and group (13) give the
/// user and account. The fleet is one node "swf-0" with one CPU (1000 millicores) per processor
/// and each job is one task of `size` CPUs, so the single processor pool is placed exactly.
/// Throws TraceError when the file cannot be read, the machine size is unknown, or (strict) on
/// the first malformed record; otherwise malformed records are skipped and listed in issues.
Trace ReadSwf(const std::string& path, const ReaderOptions& options, const SwfOptions& swf = {});

}  // namespace mlsched::sim
