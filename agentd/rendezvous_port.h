// The rendezvous port of an attempt, reserved by the agent of rank 0's node at prepare: a TCP
// socket bound to port 0 of MASTER_ADDR (the kernel picks the port, so nobody can derive it from
// public job ids), with SO_REUSEADDR and not listening. Its port goes to schedd in
// PrepareResult.master_port and to every rank as MASTER_PORT in the commit; the socket itself is
// inherited by rank 0 (MLSCHED_RENDEZVOUS_FD), which listens on it at once (mltrain), so no other
// process can take the port between the reservation and the rendezvous without binding it first
// with SO_REUSEADDR and listening before rank 0 (then rank 0 exits 75 and the job is requeued).
// A program that binds MASTER_PORT itself (PyTorch's TCPStore sets SO_REUSEADDR) still can: a
// bound socket that does not listen is no obstacle to a second SO_REUSEADDR bind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agentd/launcher.h"
#include "common/units.h"

namespace mlsched::agent {

/// A reserved rendezvous port and the socket that holds it.
struct RendezvousReservation {
  std::shared_ptr<const OwnedFd> socket;  // bound, not listening, close-on-exec, descriptor >= 3
  int32_t port = 0;                       // 1-65535, chosen by the kernel
};

/// Reserves a port on `address` (a host name or numeric address of this node: the agent's
/// --address; the first address it resolves to is used). Errors name the address and the reason,
/// e.g. "cannot reserve a rendezvous port on '10.0.0.7': bind: Cannot assign requested address".
Parsed<RendezvousReservation> ReserveRendezvousPort(const std::string& address);

}  // namespace mlsched::agent
