// The built tools against a fake schedd on a Unix socket that answers as an attacker (or a broken
// or old server) would: job names, reasons, node names and error messages full of terminal
// escapes, a paged ListJobs, a listing that never ends. What reaches the terminal must be inert,
// every page must be followed, and the listing must stop.
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "mlsched/v1/admin.grpc.pb.h"
#include "mlsched/v1/jobs.grpc.pb.h"
#include "tests/cli/hostile_text.h"

namespace fs = std::filesystem;
using namespace mlsched;
using mlsched::cli::testing::Inert;
using mlsched::cli::testing::kHostile;  // in error messages: any byte
using mlsched::cli::testing::kHostileEscaped;
using mlsched::cli::testing::kHostileUtf8;  // in string fields
using mlsched::cli::testing::kHostileUtf8Escaped;

namespace {

enum class Paging { kPages, kOld, kEndless };

/// JobService: `total` jobs (ids 1..total), the odd ones named kHostileUtf8, paged `limit` at a
/// time (kPages), all at once ignoring paging (kOld), or a fresh token forever (kEndless). Errors
/// echo kHostile.
class FakeJobs final : public v1::JobService::Service {
 public:
  Paging paging = Paging::kPages;
  int64_t total = 0;
  int32_t limit = 100;
  std::mutex mu;
  std::vector<v1::ListJobsRequest> lists;
  std::vector<int64_t> cancelled;
  grpc::StatusCode submit_code = grpc::StatusCode::INVALID_ARGUMENT;  ///< what SubmitJob answers
  std::vector<std::string> submission_keys;                           ///< of every SubmitJob call

  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) override {
    std::lock_guard lock(mu);
    lists.push_back(*req);
    if (paging == Paging::kEndless) {
      resp->set_next_page_token("t" + std::to_string(lists.size()));
      return grpc::Status::OK;
    }
    const int64_t after = paging == Paging::kOld || req->page_token().empty() ? 0 : std::stoll(req->page_token());
    const int64_t end = paging == Paging::kOld ? total : std::min(total, after + std::min(req->page_size(), limit));
    for (int64_t id = after + 1; id <= end; ++id) *resp->add_jobs() = Job(id);
    if (end < total) resp->set_next_page_token(std::to_string(end));
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::JobInfo* job) override {
    if (req->job_id() != 1) return {grpc::StatusCode::NOT_FOUND, "job " + std::to_string(req->job_id()) + ": " + kHostile};
    *job = Job(1);
    job->mutable_spec()->set_script("#!/bin/sh\necho " + kHostileUtf8 + "\n");
    return grpc::Status::OK;
  }
  grpc::Status ExplainJob(grpc::ServerContext*, const v1::ExplainJobRequest*, v1::ExplainJobResponse* resp) override {
    *resp->mutable_job() = Job(1);
    resp->set_start_basis(kHostileUtf8);
    return grpc::Status::OK;
  }
  grpc::Status CancelJobs(grpc::ServerContext*, const v1::CancelJobsRequest* req, v1::CancelJobsResponse* resp) override {
    std::lock_guard lock(mu);
    cancelled.assign(req->job_ids().begin(), req->job_ids().end());
    resp->add_errors("job 1: permission denied: owned by " + kHostileUtf8);
    return grpc::Status::OK;
  }
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::SubmitJobResponse*) override {
    std::lock_guard lock(mu);
    submission_keys.push_back(req->submission_key());
    if (submit_code == grpc::StatusCode::UNAVAILABLE) return {submit_code, "schedd is restarting"};
    return {submit_code, "unknown partition '" + kHostile + "'"};
  }

  static v1::JobInfo Job(int64_t id) {
    v1::JobInfo j;
    j.set_job_id(id);
    j.set_user(kHostileUtf8);
    j.set_state(v1::PENDING);
    j.set_reason(kHostileUtf8);
    j.mutable_spec()->set_name(id % 2 ? kHostileUtf8 : "even");
    j.mutable_spec()->set_account(kHostileUtf8);
    j.mutable_spec()->set_ntasks(1);
    return j;
  }
};

/// AdminService: one node whose name, state and reason are kHostileUtf8; a policy reload that
/// fails quoting it.
class FakeAdmin final : public v1::AdminService::Service {
 public:
  grpc::Status ListNodes(grpc::ServerContext*, const v1::ListNodesRequest*, v1::ListNodesResponse* resp) override {
    auto* n = resp->add_nodes();
    n->set_name(kHostileUtf8);
    n->set_state(kHostileUtf8);
    n->set_reason(kHostileUtf8);
    return grpc::Status::OK;
  }
  grpc::Status ReloadPolicy(grpc::ServerContext*, const v1::ReloadPolicyRequest*, v1::ReloadPolicyResponse* resp) override {
    resp->set_reloaded(false);
    resp->set_path("/etc/" + kHostileUtf8);
    resp->add_errors("policy.toml:1:1: unknown key '" + kHostileUtf8 + "'");
    return grpc::Status::OK;
  }
};

struct FakeSchedd {
  fs::path dir = fs::temp_directory_path() / ("mlsched-fake-schedd-" + std::to_string(std::random_device{}()));
  FakeJobs jobs;
  FakeAdmin admin;
  std::unique_ptr<grpc::Server> server;
  FakeSchedd() {
    fs::create_directories(dir);
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + (dir / "s.sock").string(), grpc::InsecureServerCredentials());
    b.RegisterService(&jobs);
    b.RegisterService(&admin);
    server = b.BuildAndStart();
  }
  ~FakeSchedd() {
    server->Shutdown();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  struct Result {
    int exit_code = -1;
    std::string out, err;
  };
  /// Runs `tool args` (trusted test strings) against this schedd.
  Result Run(const std::string& tool, const std::string& args) {
    const std::string line = "MLSCHED_RETRY=0 " + tool + " --server unix:" + (dir / "s.sock").string() + " " + args +
                             " </dev/null >" + (dir / "out").string() + " 2>" + (dir / "err").string();
    const int status = std::system(line.c_str());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = Slurp(dir / "out");
    r.err = Slurp(dir / "err");
    return r;
  }
  static std::string Slurp(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

const std::string kMlsub = MLSCHED_MLSUB_BIN, kMlq = MLSCHED_MLQ_BIN, kMlcancel = MLSCHED_MLCANCEL_BIN,
                  kMladmin = MLSCHED_MLADMIN_BIN;

size_t Lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("mlq follows every page and prints hostile names escaped, one line per job", "[cli][fake][security]") {
  FakeSchedd s;
  s.jobs.total = 250;
  auto r = s.Run(kMlq, "-o '%i %j %u %a %R'");
  CHECK(r.exit_code == 0);
  CHECK(Inert(r.out));
  CHECK(Lines(r.out) == 251);  // header and 250 jobs: no line forged by a CR or LF in a name
  CHECK_THAT(r.out, Catch::Contains("\n1 " + kHostileUtf8Escaped + " " + kHostileUtf8Escaped) &&
                        Catch::Contains("\n250 even " + kHostileUtf8Escaped));
  REQUIRE(s.jobs.lists.size() == 3);
  CHECK(s.jobs.lists[0].page_size() == 1000);
  CHECK(s.jobs.lists[2].page_token() == "200");
  r = s.Run(kMlq, "--json");
  CHECK(r.exit_code == 0);
  CHECK(Inert(r.out));
  auto parsed = nlohmann::json::parse(r.out);
  REQUIRE(parsed.size() == 250);  // one array over all pages
  CHECK(parsed[0]["name"].get<std::string>().starts_with("\x1b]0;pwned"));
}

TEST_CASE("mlq -a asks for the last 7 days, --since and --max-jobs bound the listing", "[cli][fake]") {
  FakeSchedd s;
  s.jobs.total = 250;
  auto r = s.Run(kMlq, "-a -h");
  CHECK(r.exit_code == 0);
  REQUIRE(!s.jobs.lists.empty());
  const auto& req = s.jobs.lists[0];
  CHECK(req.include_all_finished());
  CHECK(std::abs(req.finished_since() - (std::time(nullptr) - 7 * 86400)) < 120);
  s.jobs.lists.clear();
  r = s.Run(kMlq, "--since @1700000000 --max-jobs 120 -h");
  CHECK(r.exit_code == 0);
  CHECK(Lines(r.out) == 120);
  CHECK_THAT(r.err, Catch::Contains("mlq: showing the first 120 jobs (--max-jobs)"));
  CHECK(s.jobs.lists[0].finished_since() == 1'700'000'000);
  CHECK(s.jobs.lists.size() == 2);
  r = s.Run(kMlq, "--since yesterday");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("mlq: --since: bad time 'yesterday'"));
  r = s.Run(kMlq, "--max-jobs 0");
  CHECK(r.exit_code == 2);
}

TEST_CASE("mlq against an old schedd that ignores paging prints everything once", "[cli][fake]") {
  FakeSchedd s;
  s.jobs.paging = Paging::kOld;
  s.jobs.total = 1500;
  auto r = s.Run(kMlq, "-h -o %i");
  CHECK(r.exit_code == 0);
  CHECK(Lines(r.out) == 1500);
  CHECK(s.jobs.lists.size() == 1);
}

TEST_CASE("mlq stops a schedd that never stops paging and exits 1", "[cli][fake][security]") {
  FakeSchedd s;
  s.jobs.paging = Paging::kEndless;
  auto r = s.Run(kMlq, "");
  CHECK(r.exit_code == 1);
  CHECK(s.jobs.lists.size() == 10000);
  CHECK_THAT(r.err, Catch::Contains("still sending pages after 10000") && Catch::Contains("incomplete"));
}

TEST_CASE("mlcancel -n cancels the matching jobs of every page and escapes schedd's errors", "[cli][fake][security]") {
  FakeSchedd s;
  s.jobs.total = 250;
  auto r = s.Run(kMlcancel, "-n even");
  CHECK(r.exit_code == 1);  // the fake reports one error
  CHECK(s.jobs.cancelled.size() == 125);
  CHECK(s.jobs.cancelled.back() == 250);  // from the third page
  CHECK(Inert(r.err));
  CHECK_THAT(r.err, Catch::Contains("owned by " + kHostileUtf8Escaped));
}

TEST_CASE("mladmin, mlq --explain and mlsub print what schedd sends escaped", "[cli][fake][security]") {
  FakeSchedd s;
  for (const auto& [tool, args] : std::vector<std::pair<std::string, std::string>>{
           {kMladmin, "show job 1"}, {kMladmin, "show job 1 --json"}, {kMladmin, "nodes"}, {kMladmin, "nodes --json"},
           {kMlq, "--explain 1"}, {kMlq, "--explain 1 --json"}}) {
    auto r = s.Run(tool, args);
    INFO(tool << " " << args);
    CHECK(r.exit_code == 0);
    CHECK(Inert(r.out));
    CHECK((r.out.find(kHostileUtf8Escaped) != std::string::npos || r.out.find("\\u001b]0;pwned") != std::string::npos));
  }
  for (const auto& [tool, args, shown] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {kMladmin, "show job 2", kHostileEscaped}, {kMlsub, "--wrap true", kHostileEscaped},
           {kMladmin, "policy reload", kHostileUtf8Escaped}}) {
    auto r = s.Run(tool, args);
    INFO(tool << " " << args);
    CHECK(r.exit_code == 1);
    CHECK(Inert(r.err));
    CHECK_THAT(r.err, Catch::Contains(shown));
  }
}

#if defined(MLSCHED_MLALLOC_BIN) && defined(MLSCHED_MLRUN_BIN)
TEST_CASE("mlalloc and mlrun whose allocation is unconfirmed print the submission key they sent, and take it back",
          "[cli][fake]") {
  FakeSchedd s;
  s.jobs.submit_code = grpc::StatusCode::UNAVAILABLE;  // as if the answer was lost: it may be stored
  for (const std::string tool : {MLSCHED_MLALLOC_BIN, MLSCHED_MLRUN_BIN}) {
    s.jobs.submission_keys.clear();
    auto r = s.Run(tool, "-n 1 -Q true");
    INFO(tool << ": " << r.err);
    CHECK(r.exit_code == 3);  // schedd unreachable
    REQUIRE(s.jobs.submission_keys.size() == 1);  // MLSCHED_RETRY=0: one try
    const std::string key = s.jobs.submission_keys[0];
    CHECK(key.size() >= 16);
    CHECK_THAT(r.err, Catch::Contains("the allocation is not confirmed"));
    CHECK_THAT(r.err, Catch::Contains("again with --submission-key " + key + " "));
    CHECK_THAT(r.err, Catch::Contains("schedd cancels it within its grace"));
    // ... and run again with it, the same key reaches schedd (the stored allocation, not a second)
    s.jobs.submission_keys.clear();
    r = s.Run(tool, "--submission-key " + key + " -n 1 -Q true");
    REQUIRE(s.jobs.submission_keys.size() == 1);
    CHECK(s.jobs.submission_keys[0] == key);
  }
  // Refused outright (schedd answered): nothing can be stored, so no such help.
  s.jobs.submit_code = grpc::StatusCode::INVALID_ARGUMENT;
  auto r = s.Run(MLSCHED_MLALLOC_BIN, "-n 1 -Q true");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, !Catch::Contains("not confirmed"));
}
#endif
