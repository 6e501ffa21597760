// Conversions between the wire types (mlsched.v1 protobufs) and the pure core's value types.
// The only place where both meet.
#pragma once

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/types.pb.h"
#include "schedd/core/types.h"
#include "schedd/server/store.h"

namespace mlsched::server {

/// The core's view of a submitted spec (user filled in by the server).
core::JobSpec ToCoreSpec(const mlsched::v1::JobSpec& spec, const std::string& user);
/// ToCoreSpec for a job of `uid`: root's jobs require core::kRootJobsFeature.
core::JobSpec ToCoreSpecOf(const mlsched::v1::JobSpec& spec, const std::string& user, uint32_t uid);
/// Resources of a node registration in the core's fixed-point form.
core::ResourceVector ToCoreResources(const mlsched::v1::Resources& r);
mlsched::v1::Resources ToProtoResources(const core::ResourceVector& r);
/// A registered node as the core sees it (health set by the caller); kRootJobsFeature when its
/// agent runs root's jobs.
core::Node ToCoreNode(const mlsched::v1::RegisterNode& reg);
mlsched::v1::Pool ToProtoPool(core::Pool p);
core::Pool ToCorePool(mlsched::v1::Pool p);
mlsched::v1::JobState ToProtoState(core::JobState s);
/// Removes what only a job's owner and operators may see: environment, script and argv (these
/// carry secrets, e.g. an exported AWS_SECRET_ACCESS_KEY). The rest is public, as in squeue.
void RedactJobDetails(mlsched::v1::JobSpec* spec);
/// RedactJobDetails on the job's spec, and its usage cleared (what its processes used, as
/// Slurm's PrivateData=usage): for callers who are neither its owner nor an operator.
void RedactJobInfo(mlsched::v1::JobInfo* info);
/// A job row read from disk, for jobs no longer held in memory (without environment and script).
mlsched::v1::JobInfo JobInfoFromRow(const JobRow& row);

}  // namespace mlsched::server
