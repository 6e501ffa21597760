// --export: Slurm's semantics (ALL, NONE, ALL,VAR=val, VAR lists).
#include <catch2/catch.hpp>

#include "cli/submission.h"

using namespace mlsched::cli;

namespace {

const Environment kEnv{{"PATH", "/usr/bin"}, {"HOME", "/home/u"}, {"LANG", "C.UTF-8"}, {"MLSCHED_TOKEN", "secret"}};

Environment Export(const std::string& value) {
  auto r = ResolveExport(value, kEnv);
  INFO(r.error);
  REQUIRE(r);
  return *r.value;
}

}  // namespace

TEST_CASE("ALL exports the whole environment except the shared token", "[cli][export]") {
  Environment all = Export("ALL");
  CHECK(all == Environment{{"PATH", "/usr/bin"}, {"HOME", "/home/u"}, {"LANG", "C.UTF-8"}});
  CHECK(Export("") == all);  // --export= behaves like the default
}

TEST_CASE("NONE exports nothing", "[cli][export]") { CHECK(Export("NONE").empty()); }

TEST_CASE("ALL with assignments adds and overrides", "[cli][export]") {
  auto e = Export("ALL,LANG=C,EPOCHS=3");
  CHECK(e.at("LANG") == "C");
  CHECK(e.at("EPOCHS") == "3");
  CHECK(e.at("PATH") == "/usr/bin");
  CHECK(e.size() == 4);
}

TEST_CASE("a list of names exports only those, plus assignments", "[cli][export]") {
  CHECK(Export("PATH,EPOCHS=3") == Environment{{"PATH", "/usr/bin"}, {"EPOCHS", "3"}});
  CHECK(Export("HOME,UNSET_VAR") == Environment{{"HOME", "/home/u"}});  // unset names are skipped
  CHECK(Export("NONE,LANG") == Environment{{"LANG", "C.UTF-8"}});
  CHECK(Export("MLSCHED_TOKEN").empty());
}

TEST_CASE("values may contain '=' and commas", "[cli][export]") {
  auto e = Export("NONE,CUDA_VISIBLE_DEVICES=0,1,OPTS=a=b,X=");
  CHECK(e.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(e.at("OPTS") == "a=b");
  CHECK(e.at("X").empty());
  CHECK(e.size() == 3);
}

TEST_CASE("a bad item is named", "[cli][export]") {
  auto r = ResolveExport("1BAD", kEnv);
  REQUIRE_FALSE(r);
  CHECK(r.error == "bad --export item '1BAD': not a variable name, VAR=value, ALL or NONE");
  CHECK_FALSE(ResolveExport("=x", kEnv));
}

TEST_CASE("the export reaches the spec, and errors name the directive line", "[cli][export]") {
  SubmitOptions o;
  o.export_env = "NONE,A=1";
  SubmitPayload p;
  p.kind = SubmitPayload::Kind::kWrap;
  p.script = "true";
  auto s = BuildJobSpec(o, p, SubmitContext{"/", kEnv, std::nullopt});
  REQUIRE(s);
  CHECK(s.value->env().size() == 1);
  CHECK(s.value->env().at("A") == "1");
  o.export_env = "9x";
  o.origin["export"] = "job.sh:4";
  CHECK(BuildJobSpec(o, p, SubmitContext{"/", kEnv, std::nullopt}).error ==
        "job.sh:4: bad --export item '9x': not a variable name, VAR=value, ALL or NONE");
}

TEST_CASE("EnvironmentFrom reads NAME=value entries", "[cli][export]") {
  char a[] = "A=1", b[] = "B=x=y", c[] = "NOEQUALS";
  char* envp[] = {a, b, c, nullptr};
  CHECK(EnvironmentFrom(envp) == Environment{{"A", "1"}, {"B", "x=y"}});
}
