// Node-list compression (mlq, mladmin, schedd's provisioning programs): the inverse of ExpandHostlist (common/units.h).
#pragma once

#include <string>
#include <vector>

namespace mlsched {

/// Compresses node names into Slurm's hostlist notation: {"gpu-01","gpu-02","gpu-03","gpu-07"} ->
/// "gpu-[01-03,07]". Names are de-duplicated and sorted by (prefix, number). A name's number is
/// its trailing run of digits; a range only joins names whose numbers print with the same
/// zero-padding as its first one, so ExpandHostlist gives back exactly the input set. Names
/// with different prefixes (or no number) become separate comma-joined groups:
/// {"a1","b1","b2","head"} -> "a1,b[1-2],head". Empty input gives "".
std::string CompressHostlist(std::vector<std::string> names);

}  // namespace mlsched
