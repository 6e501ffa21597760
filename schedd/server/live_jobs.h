// Cheap looks at running jobs for the components beside the Controller (AllocationWatch,
// StepBook): one ListJobs-style listing from memory, where Controller::Get reads the store for
// every job it is asked about.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "schedd/server/controller.h"

namespace mlsched::server {

/// The summaries (as ListJobs gives them: spec without script and environment, placement) of
/// those of `ids` that are RUNNING now, by id; asked in pages of at most 1,000 ids.
std::map<int64_t, v1::JobInfo> RunningSummaries(Controller& ctl, const std::vector<int64_t>& ids);

}  // namespace mlsched::server
