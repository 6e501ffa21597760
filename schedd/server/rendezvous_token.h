// The per-attempt rendezvous secret schedd sends to every node of a gang (Prepare.rendezvous_token,
// exported to the tasks as MLSCHED_RENDEZVOUS_TOKEN). It lives only in the Prepare messages.
#pragma once

#include <string>

namespace mlsched::server {

/// 256 random bits from getrandom(2) as 64 lowercase hex digits. Throws std::system_error when the
/// kernel gives no randomness (it always does on Linux >= 3.17 once its pool is initialized).
std::string NewRendezvousToken();

}  // namespace mlsched::server
