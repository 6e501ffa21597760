// WriteBatch: the store writes and agent messages of one controller operation (a scheduling
// cycle's starts, an agent's report, a registration, a tick), collected under the controller's
// lock and completed after it is released. Waiting outside the lock lets the writes of many
// operations share one group commit (one fsync) instead of each holding the lock through its own,
// and messages whose effect must follow a durable write (a prepare after RUNNING is stored, a
// commit after the rendezvous port is) go out only once the writes are durable, re-checked
// against the state then (issue 30: 20,000 starts on 1,000 nodes took 2-3 fsyncs each under the
// lock).
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlsched/v1/agent.pb.h"
#include "schedd/server/store.h"

namespace mlsched::server {

struct WriteBatch {
  struct Write {
    std::future<void> done;
    int64_t job = 0;                   // the job whose row it writes (0: none), re-written on failure
    std::optional<AttemptRow> attempt;  // the attempt row it writes, re-written on failure
  };
  std::vector<Write> writes;
  std::vector<std::pair<std::string, v1::SchedulerMessage>> sends;  // (node, message), in order
};

}  // namespace mlsched::server
