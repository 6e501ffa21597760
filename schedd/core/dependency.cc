#include "schedd/core/dependency.h"

#include "schedd/core/names.h"

#include <array>
#include <charconv>
#include <algorithm>
#include <set>
#include <utility>

namespace mlsched::core {
namespace {

constexpr std::array<std::pair<DependencyType, const char*>, 5> kDependencyTypes{{
    {DependencyType::kAfter, "after"},
    {DependencyType::kAfterAny, "afterany"},
    {DependencyType::kAfterOk, "afterok"},
    {DependencyType::kAfterNotOk, "afternotok"},
    {DependencyType::kSingleton, "singleton"}}};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}

// A non-negative decimal integer that fills `s` exactly.
template <typename T>
std::optional<T> Number(const std::string& s) {
  T v{};
  if (s.empty() || s[0] == '-' || s[0] == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}


std::optional<std::string> ParseTerm(const std::string& term, DependencyTerm* out) {
  const std::vector<std::string> parts = Split(term, ':');
  const std::optional<DependencyType> type = ParseDependencyType(parts[0]);
  if (!type)
    return "unknown dependency type '" + parts[0] + "' in '" + term +
           "' (expected after, afterany, afterok, afternotok or singleton)";
  out->type = *type;
  if (*type == DependencyType::kSingleton) {
    if (parts.size() > 1) return "'singleton' takes no job ids (got '" + term + "')";
    return std::nullopt;
  }
  if (parts.size() < 2) return "'" + parts[0] + "' needs job ids, e.g. " + parts[0] + ":12:13";
  for (size_t i = 1; i < parts.size(); ++i) {
    auto ref = ParseJobRef(parts[i]);
    if (!ref) return "bad job id '" + parts[i] + "' in '" + term + "' (expected N or N_TASK)";
    out->jobs.push_back(*ref);
  }
  return std::nullopt;
}

// Appends the ids of one --array item ("7", "0-99", "1-11:2") to `ids` (duplicates across items are
// removed by the caller). Items are counted with their overlaps, so the work for any text is
// bounded by max_elements appends (overlapping items cannot multiply it).
std::optional<std::string> ParseArrayItem(const std::string& item, int32_t max_elements, std::vector<int32_t>* ids) {
  const std::string bad = "bad --array item '" + item + "' (expected N, A-B or A-B:STEP)";
  const size_t colon = item.find(':');
  const std::string range = item.substr(0, colon);
  int32_t step = 1;
  if (colon != std::string::npos) {
    auto s = Number<int32_t>(item.substr(colon + 1));
    if (!s || *s < 1) return bad;
    step = *s;
  }
  const size_t dash = range.find('-');
  auto first = Number<int32_t>(range.substr(0, dash));
  auto last = dash == std::string::npos ? first : Number<int32_t>(range.substr(dash + 1));
  if (!first || !last || (dash == std::string::npos && colon != std::string::npos)) return bad;
  if (*last < *first) return "--array range '" + item + "' ends before it starts";
  if (*last > kMaxArrayTaskId)
    return "--array id " + std::to_string(*last) + " above the largest allowed, " + std::to_string(kMaxArrayTaskId);
  const int64_t count = (static_cast<int64_t>(*last) - *first) / step + 1;
  if (count + static_cast<int64_t>(ids->size()) > max_elements)
    return "--array '" + item + "' makes more than " + std::to_string(max_elements) + " elements";
  for (int64_t v = *first; v <= *last; v += step) ids->push_back(static_cast<int32_t>(v));
  return std::nullopt;
}

bool Ended(JobState s) { return IsFinal(s) || s == JobState::kNodeFail; }

// Status of one term against one job state.
DependencyStatus::Kind TermOn(DependencyType type, std::optional<JobState> st) {
  using K = DependencyStatus::Kind;
  if (!st) return K::kSatisfied;  // purged: Slurm clears the dependency
  switch (type) {
    case DependencyType::kAfter: return *st == JobState::kPending ? K::kWaiting : K::kSatisfied;
    case DependencyType::kAfterAny: return Ended(*st) ? K::kSatisfied : K::kWaiting;
    case DependencyType::kAfterOk:
      if (!Ended(*st)) return K::kWaiting;
      return *st == JobState::kCompleted ? K::kSatisfied : K::kNever;
    case DependencyType::kAfterNotOk:
      if (!Ended(*st)) return K::kWaiting;
      return *st == JobState::kCompleted ? K::kNever : K::kSatisfied;
    case DependencyType::kSingleton: return K::kSatisfied;
  }
  return K::kSatisfied;
}

}  // namespace

std::optional<JobRef> ParseJobRef(const std::string& s) {
  JobRef ref;
  const size_t us = s.find('_');
  auto id = Number<JobId>(s.substr(0, us));
  if (!id || *id <= 0) return std::nullopt;
  ref.job = *id;
  if (us != std::string::npos) {
    auto task = Number<int32_t>(s.substr(us + 1));
    if (!task) return std::nullopt;
    ref.array_task = *task;
  }
  return ref;
}

const char* DependencyTypeName(DependencyType t) { return names::NameOf(kDependencyTypes, t); }

std::optional<DependencyType> ParseDependencyType(const std::string& name) {
  return names::ParseName(kDependencyTypes, name);
}

std::optional<std::string> ParseDependency(const std::string& text, DependencyRequest* out) {
  *out = DependencyRequest{};
  if (text.empty()) return "empty dependency";
  const bool comma = text.find(',') != std::string::npos, question = text.find('?') != std::string::npos;
  if (comma && question) return "dependency '" + text + "' mixes ',' (all) and '?' (any)";
  out->any = question;
  for (const std::string& term : Split(text, question ? '?' : ',')) {
    if (term.empty()) return "empty term in dependency '" + text + "'";
    DependencyTerm t;
    if (auto err = ParseTerm(term, &t)) return err;
    out->terms.push_back(std::move(t));
  }
  return std::nullopt;
}

std::optional<std::string> ParseArray(const std::string& text, int32_t max_elements, ArrayRequest* out) {
  *out = ArrayRequest{};
  const size_t pct = text.find('%');
  if (pct != std::string::npos) {
    auto n = Number<int32_t>(text.substr(pct + 1));
    if (!n || *n < 1) return "bad --array limit '" + text.substr(pct) + "' (expected %N with N >= 1)";
    out->max_running = *n;
  }
  const std::string list = text.substr(0, pct);
  if (list.empty()) return "empty --array (expected e.g. 0-99%10)";
  std::vector<int32_t> ids;
  for (const std::string& item : Split(list, ','))
    if (auto err = ParseArrayItem(item, max_elements, &ids)) return err;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  out->task_ids = std::move(ids);
  return std::nullopt;
}

JobStateIndex::JobStateIndex(const ClusterState& state) {
  states_.reserve(state.jobs.size() + state.omitted.size());
  for (const auto& [id, st] : state.omitted) states_[id] = st;
  for (const Job& j : state.jobs)
    if (j.id > 0) states_[j.id] = j.state;
}

std::optional<JobState> JobStateIndex::StateOf(JobId id) const {
  auto it = states_.find(id);
  if (it == states_.end()) return std::nullopt;
  return it->second;
}

DependencyStatus EvaluateDependencies(const JobSpec& spec, const JobStateIndex& index) {
  using K = DependencyStatus::Kind;
  DependencyStatus waiting{K::kSatisfied, ""}, never{K::kSatisfied, ""};
  int terms = 0, never_terms = 0;
  for (const Dependency& d : spec.dependencies) {
    if (d.type == DependencyType::kSingleton) continue;
    ++terms;
    K term = K::kSatisfied;
    std::string why;
    for (JobId id : d.jobs) {
      const auto st = index.StateOf(id);
      const K k = TermOn(d.type, st);
      if (k == K::kSatisfied || term == K::kNever) continue;
      term = k;
      why = std::string(DependencyTypeName(d.type)) + ":" + std::to_string(id) + " (job " +
            std::to_string(id) + (k == K::kNever ? " ended " : " is ") + JobStateName(*st) + ")";
    }
    if (term == K::kSatisfied && spec.dependency_any) return {K::kSatisfied, ""};
    if (term == K::kNever) {
      ++never_terms;
      if (never.kind == K::kSatisfied) never = {K::kNever, why};
    } else if (term == K::kWaiting && waiting.kind == K::kSatisfied) {
      waiting = {K::kWaiting, why};
    }
  }
  if (terms == 0) return {K::kSatisfied, ""};
  if (spec.dependency_any) return never_terms == terms ? never : waiting;
  if (never.kind == K::kNever) return never;
  return waiting;
}

std::string FormatDependencies(const JobSpec& spec) {
  std::string out;
  for (const Dependency& d : spec.dependencies) {
    if (!out.empty()) out += spec.dependency_any ? '?' : ',';
    out += DependencyTypeName(d.type);
    for (JobId id : d.jobs) out += ":" + std::to_string(id);
  }
  return out;
}

bool IsSingleton(const JobSpec& spec) {
  for (const Dependency& d : spec.dependencies)
    if (d.type == DependencyType::kSingleton) return true;
  return false;
}

}  // namespace mlsched::core
