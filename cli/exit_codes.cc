#include "cli/exit_codes.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace mlsched::cli {

int ExitCodeForRpc(int grpc_code) {
  constexpr int kOk = 0, kDeadlineExceeded = 4, kUnavailable = 14;
  if (grpc_code == kOk) return kExitOk;
  if (grpc_code == kUnavailable || grpc_code == kDeadlineExceeded) return kExitUnreachable;
  return kExitRefused;
}

void ExitNow(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

std::string ExitCodesHelp() {
  return "Exit codes:\n"
         "  0  success\n"
         "  1  the request was refused or failed (invalid spec, unknown job, permission denied)\n"
         "  2  usage error (bad option, bad #MLSUB directive, invalid value)\n"
         "  3  schedd unreachable or timed out\n"
         "schedd is found through --server, else $MLSCHED_SERVER, else unix:/run/mlsched/schedd.sock.\n";
}

bool IsUnconfirmed(int grpc_code) { return grpc_code == 4 || grpc_code == 14; }

std::string UnconfirmedSubmissionHelp(const std::string& submission_key) {
  return "mlsub: the submission is not confirmed: it may have been stored after its answer was lost. Run the "
         "same mlsub again with --submission-key " + submission_key +
         ": schedd then answers with that job if it was stored, and stores it once otherwise";
}

std::string UnconfirmedAllocationHelp(const std::string& tool, const std::string& submission_key) {
  return tool + ": the allocation is not confirmed: it may have been stored after its answer was lost. Run the same " +
         tool + " again with --submission-key " + submission_key +
         " to get it (or one allocation, if none was stored). No client is bound to it meanwhile, so schedd "
         "cancels it within its grace for interactive clients (schedd --interactive-client-grace, 60 s by default) "
         "and half a minute";
}

}  // namespace mlsched::cli
