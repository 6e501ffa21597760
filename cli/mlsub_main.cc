// mlsub: submit a gang job to schedd (like sbatch). The grammar lives in submit_options.h (shared
// with #MLSUB directives); this file only does I/O and the RPC.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "cli/allocate.h"
#include "cli/exit_codes.h"
#include "cli/rpc.h"
#include "cli/submission.h"
#include "common/safe_text.h"


namespace {

using namespace mlsched;
using namespace mlsched::cli;

constexpr const char* kUsage =
    "Usage: mlsub [OPTIONS] SCRIPT\n"
    "       mlsub [OPTIONS] --wrap 'CMD'\n"
    "       mlsub [OPTIONS] -- CMD [ARGS...]\n"
    "       mlsub [OPTIONS] < SCRIPT\n"
    "Submits a job: a gang of --ntasks identical tasks started all-or-nothing. A script starts with\n"
    "'#!' and may carry options on '#MLSUB' lines in its leading comment block; options given on the\n"
    "command line override them. Prints \"Submitted job N\" (or just N with --parsable).\n\n"
    "Options:\n";

Parsed<std::string> ReadScriptFile(const std::string& path) {
  Parsed<std::string> out;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    out.error = "cannot read script '" + path + "': is a directory";
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.error = "cannot read script '" + path + "': " + std::strerror(errno);
    return out;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  out.value = ss.str();
  return out;
}

std::string ReadStdin() {
  std::stringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  auto args = ParseSubmitArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args) {
    std::cerr << "mlsub: " << args.error << "\nTry 'mlsub --help'.\n";
    return kExitUsage;
  }
  if (args.value->options.help) {
    std::cout << kUsage << SubmitOptionsHelp() << "\n" << ExitCodesHelp();
    return kExitOk;
  }
  std::error_code ec;
  const SubmitContext ctx = ThisProcessContext(&ec);
  if (ec && !args.value->options.chdir) {
    std::cerr << "mlsub: cannot determine the current directory (" << ec.message() << "); give -D/--chdir\n";
    return kExitUsage;
  }
  auto sub = PrepareSubmission(*args.value, ctx, ReadScriptFile, ReadStdin);
  if (!sub) {
    std::cerr << "mlsub: " << SafeText(sub.error) << "\n";  // may quote the script
    return kExitUsage;
  }
  for (const auto& w : sub.value->warnings) std::cerr << "mlsub: warning: " << SafeText(w) << "\n";
  const int timeout_s = 30;
  SchedClient client(sub.value->options.server.value_or(""), timeout_s);
  if (!client.ConfigError().empty()) {
    std::cerr << "mlsub: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  int64_t job_id = 0;
  // Transient failures (schedd restarting, an answer lost) are retried with the same submission
  // key, so a retry never makes a second job: $MLSCHED_RETRY seconds, default 15.
  const std::string key = sub.value->options.submission_key.value_or(NewSubmissionKey());
  RpcStatus st = client.SubmitJob(sub.value->spec, &job_id, RetryBudgetFromEnv(), [&](const RpcStatus& failed, double wait_s) {
    std::cerr << "mlsub: " << SafeText(failed.message) << "; retrying in " << wait_s << " s\n";
  }, key);
  if (!st.ok()) {
    std::cerr << DescribeRpcError("mlsub", st, client.Address(), timeout_s) << "\n";
    if (IsUnconfirmed(st.code))  // a try may have reached schedd and been stored after its answer was lost
      std::cerr << UnconfirmedSubmissionHelp(key) << "\n";
    ExitNow(ExitCodeForRpc(st.code));
  }
  if (sub.value->options.parsable) std::cout << job_id << "\n";
  else std::cout << "Submitted job " << job_id << "\n";
  ExitNow(kExitOk);
}
