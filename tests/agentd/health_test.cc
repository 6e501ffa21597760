// Node health in agentd (agentd/health.h, kmsg.h): Xid reports in the kernel log, the disk, clock
// and GPU checks (against tests/agentd/fake_nvml.cc), and the administrator's program, including
// the ways a program root would run could be someone else's.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "agentd/health.h"
#include "agentd/kmsg.h"
#include "agentd/nvml.h"
#include "mlsched/v1/agent.pb.h"
#include "support.h"

using namespace mlsched::agent;

namespace {

std::string WriteProgram(const std::string& path, const std::string& body, mode_t mode = 0755) {
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), mode);
  return path;
}

}  // namespace

TEST_CASE("Xid reports are read from kernel log records as the driver writes them", "[health]") {
  auto x = ParseXid("3,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
  REQUIRE(x);
  CHECK(x->domain == 0);
  CHECK(x->bus == 0x3b);
  CHECK(x->device == 0);
  CHECK(x->code == 79);
  CHECK(x->text == "GPU has fallen off the bus");
  // dmesg's form, an older driver's address without "PCI:", a function number.
  x = ParseXid("[ 1234.5678] NVRM: Xid (0000:03:00): 48, pid=2214, name=python, An uncorrectable double bit error");
  REQUIRE(x);
  CHECK(x->bus == 3);
  CHECK(x->code == 48);
  CHECK(x->text == "An uncorrectable double bit error");
  x = ParseXid("NVRM: Xid (PCI:0001:c1:00.0): 94, pid=7, name=x, Contained: SM (0x1).\x1b[2J");
  REQUIRE(x);
  CHECK(x->domain == 1);
  CHECK(x->bus == 0xc1);
  CHECK(x->text.find('\x1b') == std::string::npos);  // terminal escapes blanked
  CHECK_FALSE(ParseXid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module 535.129.03"));
  CHECK_FALSE(ParseXid("NVRM: Xid (PCI:0000:zz:00): 79, pid=1"));
  CHECK_FALSE(ParseXid("NVRM: Xid (PCI:0000:3b:40): 79, pid=1"));   // device > 31
  CHECK_FALSE(ParseXid("NVRM: Xid (PCI:0000:3b:00): , pid=1"));
  CHECK_FALSE(ParseXid("NVRM: Xid (PCI:000000000000000000:3b:00): 79"));
  CHECK(DefaultFatalXids().count(79));
  CHECK_FALSE(DefaultFatalXids().count(13));  // an application's fault, not the node's
}

TEST_CASE("the kernel log is read as it grows, record by record", "[health]") {
  testing::TempDir dir;
  const std::string log = dir.Str("kmsg");
  std::ofstream(log) << "6,1,10,-;first\n SUBSYSTEM=pci\n6,2,11,-;sec";
  KmsgReader r(log);
  std::string error;
  CHECK(r.Read(&error) == std::vector<std::string>{"6,1,10,-;first"});  // continuation dropped, half line kept
  std::ofstream(log, std::ios::app) << "ond\n6,3,12,-;third\n";
  CHECK(r.Read(&error) == std::vector<std::string>{"6,2,11,-;second", "6,3,12,-;third"});
  CHECK(r.Read(&error).empty());
  CHECK(error.empty());
  KmsgReader missing(dir.Str("none"));
  CHECK(missing.Read(&error).empty());
  CHECK_THAT(error, Catch::Contains("cannot open"));
}

TEST_CASE("free space, the clock and a summary of what fails", "[health]") {
  testing::TempDir dir;
  CHECK_FALSE(CheckFreeSpace(dir.Str(), 1));
  CHECK_FALSE(CheckFreeSpace(dir.Str(), 0));
  auto p = CheckFreeSpace(dir.Str(), uint64_t{1} << 62);
  REQUIRE(p);
  CHECK(p->check == "disk");
  CHECK_THAT(p->reason, Catch::StartsWith(dir.Str() + ": ") && Catch::Contains("below the minimum of"));
  CHECK_FALSE(CheckFreeSpace(dir.Str("not-there"), uint64_t{1} << 62));
  // Sent at 1,000,000 ms, answered 200 ms later: the server's clock at the middle is 1,000.1 s.
  CHECK_FALSE(CheckClock(1000000, 1000200, 1000, 30));
  CHECK_FALSE(CheckClock(1000000, 1000200, 1031, 30));  // 31 s off, within 30 s + 1.1 s of error
  auto c = CheckClock(1000000, 1000200, 1100, 30);
  REQUIRE(c);
  CHECK(c->reason == "clock 99 s behind schedd's (more than 30 s allowed; is NTP running?)");
  c = CheckClock(1000000, 1000200, 900, 30);
  REQUIRE(c);
  CHECK_THAT(c->reason, Catch::StartsWith("clock 100 s ahead of schedd's"));
  CHECK_FALSE(CheckClock(1000000, 1200000, 1100, 30));  // a 200 s round trip cannot tell
  CHECK_FALSE(CheckClock(1000000, 1000200, 1100, 0));   // check off
  CHECK(SummarizeProblems({{"xid", "GPU 1 XID 79"}, {"disk", "/x: 0.1 GiB free"}}) == "xid: GPU 1 XID 79; disk: /x: 0.1 GiB free");
  CHECK(SummarizeProblems({{"program", std::string(1000, 'a')}}, 20).size() == 20);
}

TEST_CASE("an NHC-style program fails the node with its first line", "[health]") {
  testing::TempDir dir;
  chmod(dir.Str().c_str(), 0755);
  CHECK_FALSE(RunHealthProgram(WriteProgram(dir.Str("ok"), "exit 0"), std::chrono::seconds(10)));
  auto p = RunHealthProgram(WriteProgram(dir.Str("nhc"), "echo\necho 'ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted'\necho more\nexit 1"),
                            std::chrono::seconds(10));
  REQUIRE(p);
  CHECK(p->check == "program");
  CHECK(p->reason == "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted");
  p = RunHealthProgram(WriteProgram(dir.Str("quiet"), "exit 3"), std::chrono::seconds(10));
  REQUIRE(p);
  CHECK_THAT(p->reason, Catch::EndsWith("quiet exited 3"));
  p = RunHealthProgram(WriteProgram(dir.Str("hang"), "sleep 30"), std::chrono::seconds(1));
  REQUIRE(p);
  CHECK_THAT(p->reason, Catch::EndsWith("did not finish in 1 s"));
  // A program that floods its output: the reason stays bounded.
  p = RunHealthProgram(WriteProgram(dir.Str("flood"), "head -c 10000000 /dev/zero | tr '\\0' x; exit 1"), std::chrono::seconds(10));
  REQUIRE(p);
  CHECK(p->reason.size() <= kMaxHealthReasonBytes);
}

TEST_CASE("root refuses a health program that someone else could change", "[health][security]") {
  testing::TempDir dir;
  chmod(dir.Str().c_str(), 0755);
  const std::string ok = WriteProgram(dir.Str("check"), "exit 0");
  CHECK(AdminProgramUnsafe(ok, geteuid()) == "");
  CHECK(AdminProgramUnsafe("relative/check", geteuid()) == "not an absolute path");
  CHECK(AdminProgramUnsafe(dir.Str(), geteuid()) == "not a regular file");
  // The attack: a program others may rewrite, or in a directory where they may replace it.
  const std::string writable = WriteProgram(dir.Str("writable"), "exit 0", 0757);
  CHECK_THAT(AdminProgramUnsafe(writable, geteuid()), Catch::Contains("writable by group or others"));
  auto p = RunHealthProgram(writable, std::chrono::seconds(5));
  REQUIRE(p);  // not run: reported as a failing check, so the node is drained rather than owned
  CHECK_THAT(p->reason, Catch::Contains("refused") && Catch::Contains("writable by group or others"));
  std::filesystem::create_directories(dir.path / "open");
  chmod(dir.Str("open").c_str(), 0777);
  const std::string in_open = WriteProgram(dir.Str("open/check"), "exit 0");
  CHECK_THAT(AdminProgramUnsafe(in_open, geteuid()), Catch::Contains(dir.Str("open") + " is writable"));
  if (geteuid() == 0) {
    const std::string theirs = WriteProgram(dir.Str("theirs"), "exit 0");
    REQUIRE(chown(theirs.c_str(), 65534, 65534) == 0);
    CHECK_THAT(AdminProgramUnsafe(theirs, 0), Catch::Contains("owned by uid 65534"));
  }
}

TEST_CASE("GPU health through NVML and fatal Xids in the kernel log drain a node", "[health][nvml]") {
  testing::TempDir dir;
  const std::string file = dir.Str("nvml"), log = dir.Str("kmsg");
  std::ofstream(file) << "0 0 0 4000 0 0 0000:3b:00 0\n1 0 0 4000 0 0 0000:86:00 0\n";
  std::ofstream(log) << "6,1,10,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n";
  setenv("MLSCHED_FAKE_NVML", file.c_str(), 1);
  std::string why;
  auto nvml = Nvml::Load(MLSCHED_FAKE_NVML_LIBRARY, &why);
  REQUIRE(nvml);
  CHECK(nvml->IndexOfPci(0, 0x86, 0) == 1);
  CHECK(nvml->IndexOfPci(0, 0x87, 0) == -1);
  HealthConfig cfg;
  cfg.interval = std::chrono::seconds(3600);
  cfg.kmsg = log;
  cfg.expected_gpus = 2;
  cfg.min_free_bytes = 0;
  HealthMonitor monitor(cfg, nvml.get(), "", nullptr);
  CHECK(monitor.CheckQuick().empty());
  std::ofstream(log, std::ios::app) << "4,2,20,-;NVRM: Xid (PCI:0000:86:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                                    << "4,3,21,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics Exception\n";
  auto now = monitor.CheckQuick();
  REQUIRE(now.size() == 1);
  CHECK(now[0] == HealthProblem{"xid", "GPU 1 XID 79 (fallen off the bus)"});
  CHECK(monitor.CheckQuick().size() == 1);  // sticky: a fallen GPU stays failed
  // The slow checks: ECC, pending retirement, a lost GPU, a GPU gone from NVML.
  std::ofstream(file) << "0 0 0 4000 2 1 0000:3b:00 0\n1 0 0 4000 0 0 0000:86:00 1\n";
  monitor.Start();
  REQUIRE(testing::WaitUntil([&] { return monitor.Problems().size() == 4; }));
  auto all = monitor.Problems();
  CHECK(all[0] == HealthProblem{"ecc", "GPU 0: 2 uncorrectable ECC error(s)"});
  CHECK(all[1] == HealthProblem{"ecc", "GPU 0: memory pages pending retirement (reset the GPU)"});
  CHECK(all[2] == HealthProblem{"gpu", "GPU 1: GPU is lost"});
  CHECK(all[3].check == "xid");
  mlsched::v1::NodeHealth h;
  monitor.Fill(&h);
  CHECK(h.checked_at() > 0);
  CHECK(h.problems_size() == 4);
  monitor.Stop();
  std::ofstream(file) << "0 0 0 4000\n";
  HealthMonitor one_gone(cfg, nvml.get(), "", nullptr);
  one_gone.Start();
  REQUIRE(testing::WaitUntil([&] { return !one_gone.Problems().empty(); }));
  CHECK(one_gone.Problems()[0] == HealthProblem{"gpu", "1 of the 2 GPUs registered are visible to NVML"});
  one_gone.Stop();
  // A GPU node whose driver library is there but NVML fails.
  HealthMonitor broken(cfg, nullptr, "nvmlInit: Driver Not Loaded", nullptr);
  broken.Start();
  REQUIRE(testing::WaitUntil([&] { return !broken.Problems().empty(); }));
  CHECK(broken.Problems()[0] == HealthProblem{"gpu", "NVML unusable: nvmlInit: Driver Not Loaded"});
  broken.Stop();
  unsetenv("MLSCHED_FAKE_NVML");
}
