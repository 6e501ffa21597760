#include <signal.h>

#include <catch2/catch.hpp>

#include "cli/job_states.h"

using namespace mlsched;
using namespace mlsched::cli;

TEST_CASE("every state has Slurm's name and short code", "[cli][states]") {
  CHECK(StateName(v1::PENDING) == "PENDING");
  CHECK(StateCode(v1::PENDING) == "PD");
  CHECK(StateCode(v1::RUNNING) == "R");
  CHECK(StateCode(v1::COMPLETING) == "CG");
  CHECK(StateCode(v1::COMPLETED) == "CD");
  CHECK(StateCode(v1::FAILED) == "F");
  CHECK(StateCode(v1::CANCELLED) == "CA");
  CHECK(StateCode(v1::TIMEOUT) == "TO");
  CHECK(StateCode(v1::PREEMPTED) == "PR");
  CHECK(StateName(v1::NODE_FAIL) == "NODE_FAIL");
  CHECK(StateCode(v1::NODE_FAIL) == "NF");
  CHECK(StateName(v1::JOB_STATE_UNSPECIFIED) == "UNKNOWN");
  for (int s = v1::PENDING; s <= v1::NODE_FAIL; ++s) {
    auto st = static_cast<v1::JobState>(s);
    auto by_name = ParseStates(StateName(st));
    auto by_code = ParseStates(StateCode(st));
    REQUIRE(by_name);
    REQUIRE(by_code);
    CHECK(*by_name.value == std::vector<v1::JobState>{st});
    CHECK(*by_code.value == std::vector<v1::JobState>{st});
  }
}

TEST_CASE("state lists mix names and codes, any case, without duplicates", "[cli][states]") {
  auto r = ParseStates("pd,RUNNING, cd,pending");
  REQUIRE(r);
  CHECK(*r.value == std::vector<v1::JobState>{v1::PENDING, v1::RUNNING, v1::COMPLETED});
}

TEST_CASE("'all' means no state filter", "[cli][states]") {
  auto r = ParseStates("all");
  REQUIRE(r);
  CHECK(r.value->empty());
  CHECK(ParseStates("ALL").value->empty());
}

TEST_CASE("an unknown state names itself and the valid ones", "[cli][states]") {
  auto r = ParseStates("PD,RUNNNING");
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error, Catch::StartsWith("unknown job state 'RUNNNING'"));
  CHECK_THAT(r.error, Catch::Contains("PENDING/PD"));
  CHECK_FALSE(ParseStates(""));
  CHECK_FALSE(ParseStates("PD,"));
}

TEST_CASE("finished states", "[cli][states]") {
  CHECK(IsFinished(v1::COMPLETED));
  CHECK(IsFinished(v1::CANCELLED));
  CHECK(IsFinished(v1::FAILED));
  CHECK(IsFinished(v1::TIMEOUT));
  CHECK_FALSE(IsFinished(v1::PENDING));
  CHECK_FALSE(IsFinished(v1::RUNNING));
  CHECK_FALSE(IsFinished(v1::PREEMPTED));  // requeued
}

TEST_CASE("signals by name, with or without SIG, or by number", "[cli][states]") {
  CHECK(*ParseSignal("TERM").value == SIGTERM);
  CHECK(*ParseSignal("SIGUSR1").value == SIGUSR1);
  CHECK(*ParseSignal("kill").value == SIGKILL);
  CHECK(*ParseSignal("usr2").value == SIGUSR2);
  CHECK(*ParseSignal("9").value == 9);
  CHECK(*ParseSignal("15").value == 15);
  auto bad = ParseSignal("FOO");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error, Catch::Contains("unknown signal 'FOO'"));
  CHECK_FALSE(ParseSignal("0"));
  CHECK_FALSE(ParseSignal("65"));
  CHECK_FALSE(ParseSignal("9x"));
  CHECK_FALSE(ParseSignal(""));
}

TEST_CASE("job ids are positive integers", "[cli][states]") {
  CHECK(*ParseJobId("12").value == 12);
  CHECK(ParseJobId("x").error == "'x' is not a job id");
  CHECK_FALSE(ParseJobId("0"));
  CHECK_FALSE(ParseJobId("-4"));
  CHECK_FALSE(ParseJobId("12abc"));
  CHECK_FALSE(ParseJobId(""));
}
