// Helpers for the simulator tests: temporary files and small hand-built traces.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "schedd/sim/trace.h"

namespace mlsched::sim::testing {

/// Directory of the project's test data (tests/data).
inline std::string DataDir() { return MLSCHED_TEST_DATA_DIR; }

/// Writes `content` to a fresh file under a per-process temp directory; returns its path.
/// Names ending in ".gz" are written gzip-compressed.
inline std::string WriteTemp(const std::string& name, const std::string& content) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("mlsim-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path path = dir / name;
  if (path.extension() == ".gz") {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, content.data(), static_cast<unsigned>(content.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << content;
  }
  return path.string();
}

/// A one-task CPU job of `cpus` cores submitted at `submit` running `run` seconds with limit
/// `limit` (0 = run).
inline TraceJob CpuJob(core::JobId id, core::Timestamp submit, core::Duration run, int64_t cpus,
                       core::Duration limit = 0, const std::string& user = "u1") {
  TraceJob j;
  j.id = id;
  j.submit_time = submit;
  j.run_time = run;
  j.requested_time = limit > 0 ? limit : (run > 0 ? run : 1);
  j.spec.time_limit = j.requested_time;
  j.spec.user = user;
  j.spec.account = user;
  j.spec.ntasks = 1;
  j.spec.per_task.cpu_millis = cpus * 1000;
  j.size = cpus;
  j.origin = "test:" + std::to_string(id);
  return j;
}

}  // namespace mlsched::sim::testing
