// Conversions between the Store's rows (store.h) and HA mode's etcd values
// (mlsched/v1/stored.proto): the same fields, one message per row.
#pragma once

#include "mlsched/v1/stored.pb.h"
#include "schedd/server/store.h"

namespace mlsched::server {

/// A job row as stored in etcd (every column but the spec, which lives under its own key).
v1::StoredJob ToStored(const JobRow& r);
/// The job row of a stored value (spec empty).
JobRow FromStored(const v1::StoredJob& s);
/// An attempt row as stored in etcd.
v1::StoredAttempt ToStored(const AttemptRow& r);
/// The attempt row of a stored value.
AttemptRow FromStored(const v1::StoredAttempt& s);
/// A step row as stored in etcd, and back.
v1::StoredStep ToStored(const StepRow& r);
StepRow FromStored(const v1::StoredStep& s);

}  // namespace mlsched::server
