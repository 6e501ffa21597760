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

}  // namespace mlsched::cli
