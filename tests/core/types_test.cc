#include <catch2/catch.hpp>

#include "schedd/core/types.h"

using namespace mlsched::core;

TEST_CASE("ResourceVector arithmetic is component-wise and exact", "[core][types]") {
  ResourceVector a{2000, 1 << 20, {{"h100", 4}}};
  ResourceVector b{1000, 1 << 19, {{"h100", 2}}};
  CHECK(b.FitsIn(a));
  CHECK_FALSE(a.FitsIn(b));
  ResourceVector c = a;
  c -= b;
  CHECK(c == ResourceVector{1000, 1 << 19, {{"h100", 2}}});
  c += b;
  CHECK(c == a);
  CHECK(a.GpuCount() == 4);
  ResourceVector other_type{0, 0, {{"a100", 1}}};
  CHECK_FALSE(other_type.FitsIn(a));
  CHECK(ResourceVector{}.FitsIn(a));
}

TEST_CASE("names round-trip through their parsers", "[core][types]") {
  for (Pool p : {Pool::kOnDemand, Pool::kSpot, Pool::kReserved}) CHECK(ParsePool(PoolName(p)) == p);
  for (JobState s : {JobState::kPending, JobState::kRunning, JobState::kCompleting, JobState::kCompleted,
                     JobState::kFailed, JobState::kCancelled, JobState::kTimeout, JobState::kPreempted,
                     JobState::kNodeFail})
    CHECK(ParseJobState(JobStateName(s)) == s);
  for (Topology t : {Topology::kNone, Topology::kSameDomain, Topology::kSameZone, Topology::kSameRegion,
                     Topology::kSpread})
    CHECK(ParseTopology(TopologyName(t)) == t);
  CHECK_FALSE(ParsePool("cheap").has_value());
  CHECK(std::string(PendingReasonName(PendingReason::kResources)) == "Resources");
  CHECK(IsFinal(JobState::kTimeout));
  CHECK_FALSE(IsFinal(JobState::kPreempted));
}
