// Trace readers: field mapping, header handling, malformed records (FILE:LINE), gzip input.
#include <catch2/catch.hpp>

#include "schedd/sim/gpu_readers.h"
#include "schedd/sim/sim_config.h"
#include "schedd/sim/swf_reader.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::DataDir;
using mlsched::sim::testing::WriteTemp;

namespace {
const char* kSwf =
    "; Version: 2.2\n"
    "; MaxNodes: 8\n"
    "; MaxProcs: 16\n"
    "1 100 -1 50 4 -1 -1 4 60 -1 1 7 3 -1 -1 -1 -1 -1\n"
    "2 110 -1 500 6 -1 -1 -1 300 -1 1 8 -1 -1 -1 -1 -1 -1\n"   // size from field 5, clipped run
    "\n"
    "3 120 -1 10 2 -1 -1 2 -1 -1 1 7 3 -1 -1 -1 -1 -1\n";      // no request: limit = run
}  // namespace

TEST_CASE("SWF maps size, run time, limit, user and account", "[sim][reader]") {
  Trace t = ReadSwf(WriteTemp("a.swf", kSwf), {});
  REQUIRE(t.jobs.size() == 3);
  REQUIRE(t.nodes.size() == 1);
  CHECK(t.nodes[0].capacity.cpu_millis == 16000);
  const TraceJob& a = t.jobs[0];
  CHECK(a.id == 1);
  CHECK(a.submit_time == 0);  // rebased to the first submission
  CHECK(a.run_time == 50);
  CHECK(a.spec.time_limit == 60);
  CHECK(a.spec.per_task.cpu_millis == 4000);
  CHECK(a.spec.ntasks == 1);
  CHECK(a.spec.user == "u7");
  CHECK(a.spec.account == "g3");
  const TraceJob& b = t.jobs[1];
  CHECK(b.submit_time == 10);
  CHECK(b.size == 6);
  CHECK(b.run_time == 300);
  CHECK(b.hits_time_limit);
  CHECK(b.spec.account == "u8");  // no group: the user is the account
  CHECK(t.jobs[2].spec.time_limit == 10);
  CHECK(t.skipped == 0);
}

TEST_CASE("SWF malformed records are reported as FILE:LINE and skipped, or fatal", "[sim][reader]") {
  const std::string text = std::string(kSwf) +
                           "4 130 -1 10 2 -1 -1 2 60 -1 1 7 3 -1 -1 -1\n"           // 16 fields
                           "5 140 -1 x 2 -1 -1 2 60 -1 1 7 3 -1 -1 -1 -1 -1\n"      // junk
                           "6 150 -1 10 32 -1 -1 32 60 -1 1 7 3 -1 -1 -1 -1 -1\n";  // too big
  const std::string path = WriteTemp("bad.swf", text);
  Trace t = ReadSwf(path, {});
  CHECK(t.jobs.size() == 3);
  REQUIRE(t.skipped == 3);
  CHECK(t.issues[0] == path + ":8: expected 18 fields, found 16");
  CHECK(t.issues[1] == path + ":9: field 4 is not an integer: 'x'");
  CHECK(t.issues[2] == path + ":10: job needs 32 processors but the machine has 16");
  ReaderOptions strict;
  strict.strict = true;
  CHECK_THROWS_WITH(ReadSwf(path, strict), path + ":8: expected 18 fields, found 16");
}

TEST_CASE("SWF without a machine size is an error - an override supplies it", "[sim][reader]") {
  const std::string path = WriteTemp("nohdr.swf", "1 0 -1 5 2 -1 -1 2 10 -1 1 1 1 -1 -1 -1 -1 -1\n");
  CHECK_THROWS_AS(ReadSwf(path, {}), TraceError);
  SwfOptions swf;
  swf.processors = 4;
  CHECK(ReadSwf(path, {}, swf).nodes[0].capacity.cpu_millis == 4000);
}

TEST_CASE("duplicate job ids are rejected with both locations", "[sim][reader]") {
  const std::string path = WriteTemp(
      "dup.swf", "; MaxProcs: 4\n1 0 -1 5 2 -1 -1 2 10 -1 1 1 1 -1 -1 -1 -1 -1\n"
                 "1 3 -1 5 2 -1 -1 2 10 -1 1 1 1 -1 -1 -1 -1 -1\n");
  CHECK_THROWS_WITH(ReadSwf(path, {}), Catch::Contains("duplicate job id 1"));
}

TEST_CASE("gzip-compressed traces read like plain ones", "[sim][reader]") {
  Trace plain = ReadSwf(WriteTemp("p.swf", kSwf), {});
  Trace gz = ReadSwf(WriteTemp("p.swf.gz", kSwf), {});
  REQUIRE(gz.jobs.size() == plain.jobs.size());
  for (size_t i = 0; i < gz.jobs.size(); ++i) CHECK(gz.jobs[i].run_time == plain.jobs[i].run_time);
  Trace kth = ReadSwf(DataDir() + "/traces/KTH-SP2.input.swf.gz", {});
  CHECK(kth.jobs.size() == 28481);
  CHECK(kth.nodes[0].capacity.cpu_millis == 100000);
  CHECK(kth.skipped == 0);
}

TEST_CASE("Philly CSV maps to GPU gangs of one-GPU tasks", "[sim][reader]") {
  const std::string path = WriteTemp(
      "philly.csv",
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-09-04 10:30:41,120.0,8,960.0,7f04ca\n"
      "2017-09-04 10:30:40,99.6,1,99.6,6214e9\n"
      "2017-09-04 10:30:42,10.0,0,0.0,6214e9\n"
      "2017-13-04 10:30:42,10.0,1,10.0,6214e9\n");
  Trace t = ReadPhilly(path, {});
  REQUIRE(t.jobs.size() == 2);
  CHECK(t.jobs[0].submit_time == 0);
  CHECK(t.jobs[0].run_time == 100);
  CHECK(t.jobs[1].submit_time == 1);
  CHECK(t.jobs[1].spec.ntasks == 8);
  CHECK(t.jobs[1].spec.per_task.gpus.at("") == 1);
  CHECK(t.jobs[1].spec.account == "vc-7f04ca");
  CHECK(t.jobs[1].spec.time_limit == 120);
  REQUIRE(t.skipped == 2);
  CHECK(t.issues[0] == path + ":4: bad num_gpus '0' (want a positive integer)");
  CHECK(t.issues[1] == path + ":5: bad timestamp '2017-13-04 10:30:42'");
  CHECK_THROWS_AS(ReadPhilly(WriteTemp("h.csv", "a,b\n"), {}), TraceError);
}

TEST_CASE("UTC timestamps parse to epoch seconds", "[sim][reader]") {
  int64_t t = 0;
  REQUIRE(ParseUtcTimestamp("1970-01-02 00:00:01", t));
  CHECK(t == 86401);
  CHECK_FALSE(ParseUtcTimestamp("1970-01-02T00:00:01", t));
}

TEST_CASE("Pollux workloads need a run time per application", "[sim][reader]") {
  const std::string path = DataDir() + "/traces/pollux-workload-1.csv";
  CHECK_THROWS_WITH(ReadPollux(path, {}, {}), Catch::Contains("--app-runtimes"));
  std::map<std::string, int64_t> runtimes{{"cifar10", 3600}, {"deepspeech2", 7200},
                                          {"ncf", 600},      {"bert", 1800},
                                          {"imagenet", 36000}, {"yolov3", 9000}};
  Trace t = ReadPollux(path, {}, runtimes);
  REQUIRE(t.jobs.size() == 160);
  CHECK(t.skipped == 0);
  CHECK(t.jobs[0].spec.name == "cifar10-0");
  CHECK(t.jobs[0].submit_time == 0);
  CHECK(t.jobs[0].spec.ntasks == 6);
  CHECK(t.jobs[0].run_time == 3600);
  runtimes.erase("ncf");
  Trace partial = ReadPollux(path, {}, runtimes);
  CHECK(partial.skipped > 0);
  CHECK_THAT(partial.issues[0], Catch::Contains("no run time given for application 'ncf'"));
}

TEST_CASE("Alibaba pods and nodes map GPU types, fractional GPUs and QoS", "[sim][reader]") {
  const std::string nodes = WriteTemp("nodes.csv",
                                      "sn,cpu_milli,memory_mib,gpu,model\n"
                                      "n0,64000,262144,2,P100\n"
                                      "n1,32000,131072,0,\n");
  const std::string pods = WriteTemp(
      "pods.csv",
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p0,12000,16384,1,460,V100M16|P100,LS,Running,100,400,150\n"
      "p1,4000,1024,0,0,,BE,Pending,120,200,\n"
      "p2,4000,1024,0,0,,BE,Failed,300,200,250\n");
  Trace t = ReadAlibaba(pods, nodes, {});
  REQUIRE(t.nodes.size() == 2);
  CHECK(t.nodes[0].capacity.gpus.at("p100") == 2);
  CHECK(t.nodes[1].capacity.gpus.empty());
  REQUIRE(t.jobs.size() == 2);
  CHECK(t.jobs[0].run_time == 250);
  CHECK(t.jobs[0].spec.per_task.gpus.at("") == 1);
  CHECK(t.jobs[0].spec.gpu_types == std::vector<std::string>{"v100m16", "p100"});
  CHECK(t.jobs[0].spec.account == "ls");
  CHECK(t.jobs[0].spec.per_task.memory_bytes == int64_t{16384} << 20);
  CHECK(t.jobs[1].run_time == 80);  // never scheduled: its lifetime
  CHECK(t.jobs[1].submit_time == 20);
  REQUIRE(t.skipped == 1);
  CHECK_THAT(t.issues[0], Catch::Contains(":4: bad deletion_time"));
}

TEST_CASE("formats are detected from the name or the CSV header", "[sim][reader]") {
  CHECK(DetectFormat(WriteTemp("x.swf", kSwf)) == "swf");
  CHECK(DetectFormat(DataDir() + "/traces/pollux-workload-1.csv") == "pollux");
  CHECK(DetectFormat(DataDir() + "/traces/philly-2017-09-10.csv.gz") == "philly");
  CHECK(DetectFormat(DataDir() + "/traces/openb_pod_list_default.csv.gz") == "alibaba");
  CHECK_THROWS_AS(DetectFormat(WriteTemp("x.csv", "a,b,c\n")), TraceError);
}

// Found by fuzz/trace_fuzz.cc (UBSan signed overflow, and its shape checks): sizes near 2^63 in a
// downloaded trace must be malformed records or errors, not wrapped capacities and task counts.
TEST_CASE("trace sizes that would overflow 64-bit capacities are rejected", "[sim][reader][fuzz]") {
  const std::string job = "1 0 -1 100 4 -1 -1 4 200 -1 -1 1 -1 -1 -1 -1 -1 -1\n";
  for (const char* procs : {"9223372036854775807", "10021474836480", "1073741825"}) {
    const std::string path = WriteTemp("big.swf", std::string("; MaxProcs: ") + procs + "\n" + job);
    CHECK_THROWS_WITH(ReadSwf(path, {}), Catch::Contains("above the limit"));
  }
  CHECK(ReadSwf(WriteTemp("max.swf", "; MaxProcs: 1073741824\n" + job), {}).nodes[0].capacity.memory_bytes ==
        kMaxSwfProcessors << 30);
  // A job before any header (machine size still unknown) is bounded by the limit too.
  Trace late = ReadSwf(WriteTemp("late.swf", "1 0 -1 100 4 -1 -1 9223372036854775807 200 -1 -1 1 -1 -1 -1 -1 -1 -1\n"
                                             "; MaxProcs: 16\n"),
                       {});
  CHECK(late.skipped == 1);
  CHECK_THAT(late.issues[0], Catch::Contains("above the limit"));

  const std::string nodes_header = "sn,cpu_milli,memory_mib,gpu,model\n";
  CHECK_THROWS_WITH(ReadAlibabaNodes(WriteTemp("n.csv", nodes_header + "n0,1000,9223372036854775807,0,\n")),
                    Catch::Contains("malformed node record"));
  const std::string nodes = WriteTemp("n.csv", nodes_header + "n0,1000,1024,0,\n");
  Trace pods = ReadAlibaba(WriteTemp("p.csv",
                                     "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                                     "deletion_time,scheduled_time\n"
                                     "p,1000,9223372036854775807,0,0,,LS,Running,0,10,0\n"),
                           nodes, {});
  CHECK(pods.jobs.empty());
  CHECK_THAT(pods.issues.at(0), Catch::Contains("bad memory_mib"));
  Trace pollux = ReadPollux(WriteTemp("w.csv", "name,time,application,num_replicas,batch_size\nx,1,bert,3000000000,2\n"), {},
                            {{"bert", 60}});
  CHECK(pollux.jobs.empty());
  CHECK_THAT(pollux.issues.at(0), Catch::Contains("bad num_replicas"));
}

TEST_CASE("FinalizeTrace orders jobs by submit time then id, keeps each job whole, and rebases time", "[sim][reader]") {
  Trace t;
  const std::vector<std::pair<mlsched::core::JobId, mlsched::core::Timestamp>> rows = {{5, 300}, {2, 100}, {9, 100}, {1, 200}, {3, 100}};
  for (const auto& [id, submit] : rows) {
    TraceJob j;
    j.id = id;
    j.submit_time = submit;
    j.origin = "row-" + std::to_string(id);
    j.spec.name = "job-" + std::to_string(id);
    t.jobs.push_back(j);
  }
  FinalizeTrace(t);
  std::vector<mlsched::core::JobId> ids;
  for (const TraceJob& j : t.jobs) {
    ids.push_back(j.id);
    CHECK(j.origin == "row-" + std::to_string(j.id));  // moved whole, not field by field
    CHECK(j.spec.name == "job-" + std::to_string(j.id));
  }
  CHECK(ids == std::vector<mlsched::core::JobId>{2, 3, 9, 1, 5});
  CHECK(t.jobs.front().submit_time == 0);
  CHECK(t.jobs[3].submit_time == 100);
  CHECK(t.jobs.back().submit_time == 200);
  FinalizeTrace(t);  // already in order: unchanged
  CHECK(t.jobs[1].id == 3);
}
