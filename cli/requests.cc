#include "cli/requests.h"

#include <algorithm>

#include "cli/job_states.h"
#include "schedd/core/dependency.h"

namespace mlsched::cli {

namespace {

template <typename T>
Parsed<T> Fail(std::string error) {
  Parsed<T> p;
  p.error = std::move(error);
  return p;
}

// Adds "12" to the request's job_ids, or "12_3" (an array element) to its job_refs.
template <typename Req>
std::string AddJobSelector(const std::string& text, Req& req) {
  if (text.find('_') != std::string::npos) {
    if (!core::ParseJobRef(text)) return "'" + text + "' is not a job id (expected N or ARRAY_TASK, e.g. 12_3)";
    req.add_job_refs(text);
    return "";
  }
  auto id = ParseJobId(text);
  if (!id) return id.error;
  req.add_job_ids(*id.value);
  return "";
}

}  // namespace

Parsed<v1::ListJobsRequest> BuildListRequest(const JobFilters& f, int64_t now) {
  v1::ListJobsRequest req;
  for (const auto& j : f.job_ids)
    if (auto err = AddJobSelector(j, req); !err.empty()) return Fail<v1::ListJobsRequest>("--jobs: " + err);
  for (const auto& u : f.users) req.add_users(u);
  for (const auto& p : f.partitions) req.add_partitions(p);
  if (!f.states.empty()) {
    auto states = ParseStates(f.states);
    if (!states) return Fail<v1::ListJobsRequest>("--states: " + states.error);
    for (auto s : *states.value) req.add_states(s);
  }
  req.set_include_all_finished(f.all || !f.since.empty());
  if (!f.since.empty()) {
    auto since = ParseTimePoint(f.since, now);
    if (!since) return Fail<v1::ListJobsRequest>("--since: " + since.error);
    // 0 would mean "schedd's default window": a time at or before the epoch asks for everything.
    req.set_finished_since(std::max<int64_t>(1, *since.value));
  } else if (f.all && f.job_ids.empty()) {
    req.set_finished_since(now - kDefaultFinishedWindowS);
  }
  Parsed<v1::ListJobsRequest> out;
  out.value = std::move(req);
  return out;
}

std::vector<int64_t> UnknownJobIds(const v1::ListJobsRequest& req, const v1::ListJobsResponse& resp) {
  std::vector<int64_t> unknown;
  if (!req.users().empty() || !req.states().empty() || !req.partitions().empty() || req.finished_since() > 0)
    return unknown;
  for (int64_t id : req.job_ids()) {
    bool found = false;
    for (const auto& j : resp.jobs()) found = found || j.job_id() == id || j.spec().array_index().array_job_id() == id;
    if (!found && std::find(unknown.begin(), unknown.end(), id) == unknown.end()) unknown.push_back(id);
  }
  return unknown;
}

Parsed<v1::CancelJobsRequest> BuildCancelRequest(const CancelSelection& sel, const std::string& current_user) {
  v1::CancelJobsRequest req;
  for (const auto& s : sel.job_ids)
    if (auto err = AddJobSelector(s, req); !err.empty()) return Fail<v1::CancelJobsRequest>(err);
  if (!sel.states.empty()) {
    auto states = ParseStates(sel.states);
    if (!states) return Fail<v1::CancelJobsRequest>("--state: " + states.error);
    for (auto s : *states.value) req.add_states(s);
  }
  if (!sel.signal.empty()) {
    auto sig = ParseSignal(sel.signal);
    if (!sig) return Fail<v1::CancelJobsRequest>("--signal: " + sig.error);
    req.set_signal(*sig.value);
  }
  const bool explicit_jobs = !req.job_ids().empty() || !req.job_refs().empty();
  if (!explicit_jobs && sel.user.empty() && sel.states.empty() && sel.name.empty() && sel.partition.empty())
    return Fail<v1::CancelJobsRequest>("nothing to cancel: give job ids or a filter (-u, -t, -n, -p)");
  req.set_user(!sel.user.empty() || explicit_jobs ? sel.user : current_user);
  Parsed<v1::CancelJobsRequest> out;
  out.value = std::move(req);
  return out;
}

bool NeedsListing(const CancelSelection& sel) { return !sel.name.empty() || !sel.partition.empty(); }

v1::ListJobsRequest NarrowingListRequest(const v1::CancelJobsRequest& cancel, const CancelSelection& sel) {
  v1::ListJobsRequest list;
  *list.mutable_job_ids() = cancel.job_ids();
  *list.mutable_job_refs() = cancel.job_refs();
  if (!cancel.user().empty()) list.add_users(cancel.user());
  *list.mutable_states() = cancel.states();
  if (!sel.partition.empty()) list.add_partitions(sel.partition);
  return list;
}

int SelectListedJobs(const v1::ListJobsResponse& listed, const CancelSelection& sel, v1::CancelJobsRequest* cancel) {
  cancel->clear_job_ids();
  cancel->clear_job_refs();
  cancel->clear_user();
  cancel->clear_states();
  for (const auto& j : listed.jobs())
    if (!IsFinished(j.state()) && (sel.name.empty() || j.spec().name() == sel.name)) cancel->add_job_ids(j.job_id());
  return cancel->job_ids_size();
}

}  // namespace mlsched::cli
