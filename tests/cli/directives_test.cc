// #MLSUB directive parsing: where directives are read, their syntax, errors with file:line, and
// the override order (later directive lines, then the command line).
#include <catch2/catch.hpp>

#include "cli/submission.h"
#include "cli/submit_options.h"

using namespace mlsched::cli;

namespace {

DirectiveResult Parse(const std::string& script) {
  auto r = ParseDirectives(script, "job.sh");
  INFO(r.error);
  REQUIRE(r);
  return *r.value;
}

std::string ParseError(const std::string& script) {
  auto r = ParseDirectives(script, "job.sh");
  REQUIRE_FALSE(r);
  return r.error;
}

}  // namespace

TEST_CASE("directives in the leading comment block set options", "[cli][directives]") {
  auto r = Parse(
      "#!/bin/bash\n"
      "# a comment\n"
      "\n"
      "#MLSUB -J train -n 4\n"
      "#MLSUB --cpus-per-task=0.5 --mem-per-task 4G\n"
      "#MLSUB --gpus-per-task 2 --gpu-types H100,a100\n"
      "#MLSUB -t 1:30:00 -p gpu -A research --qos high\n"
      "#MLSUB -o out-%j-%t.txt -e err.txt -D /scratch --export NONE -H --topology zone --nice 10\n"
      "python train.py\n");
  const SubmitOptions& o = r.options;
  CHECK(*o.job_name == "train");
  CHECK(*o.ntasks == 4);
  CHECK(*o.cpu_millis_per_task == 500);
  CHECK(*o.memory_bytes_per_task == (int64_t{4} << 30));
  CHECK(*o.gpus_per_task == 2);
  CHECK(*o.gpu_types == std::vector<std::string>{"h100", "a100"});
  CHECK(*o.time_limit_s == 5400);
  CHECK(*o.partition == "gpu");
  CHECK(*o.account == "research");
  CHECK(*o.qos == "high");
  CHECK(*o.output == "out-%j-%t.txt");
  CHECK(*o.error == "err.txt");
  CHECK(*o.chdir == "/scratch");
  CHECK(*o.export_env == "NONE");
  CHECK(*o.hold);
  CHECK(*o.topology == "zone");
  CHECK(*o.nice == 10);
  CHECK(r.warnings.empty());
  CHECK(o.origin.at("ntasks") == "job.sh:4");
  CHECK(o.origin.at("time") == "job.sh:7");
}

TEST_CASE("directive words are split like a shell: quotes, escapes, trailing comments", "[cli][directives]") {
  auto r = Parse("#!/bin/sh\n#MLSUB -J \"my job\" --export='ALL,A=x y' # the name\n#MLSUB -o a\\ b.out\ntrue\n");
  CHECK(*r.options.job_name == "my job");
  CHECK(*r.options.export_env == "ALL,A=x y");
  CHECK(*r.options.output == "a b.out");
  CHECK_FALSE(r.options.ntasks);
}

TEST_CASE("only the leading block counts: later directives are ignored with a warning", "[cli][directives]") {
  auto r = Parse("#!/bin/sh\n#MLSUB -n 2\necho hi\n#MLSUB -n 8\n");
  CHECK(*r.options.ntasks == 2);
  REQUIRE(r.warnings.size() == 1);
  CHECK(r.warnings[0] == "job.sh:4: #MLSUB directive after the first command is ignored");
}

TEST_CASE("lookalike lines are not directives", "[cli][directives]") {
  auto r = Parse("#!/bin/sh\n# MLSUB -n 2\n#MLSUBX -n 3\n  #MLSUB -n 4\n#mlsub -n 5\n");
  CHECK_FALSE(r.options.ntasks);
}

TEST_CASE("without a shebang line 1 may carry a directive, and CRLF endings are accepted", "[cli][directives]") {
  auto r = Parse("#MLSUB -n 3\r\n#MLSUB -J x\r\n");
  CHECK(*r.options.ntasks == 3);
  CHECK(*r.options.job_name == "x");
  CHECK(r.options.origin.at("ntasks") == "job.sh:1");
}

TEST_CASE("a later directive line overrides an earlier one", "[cli][directives]") {
  auto r = Parse("#!/bin/sh\n#MLSUB -n 2 -J a\n#MLSUB -n 5\n");
  CHECK(*r.options.ntasks == 5);
  CHECK(*r.options.job_name == "a");
  CHECK(r.options.origin.at("ntasks") == "job.sh:3");
  CHECK(r.options.origin.at("job-name") == "job.sh:2");
}

TEST_CASE("directive errors name the file, the line and the option", "[cli][directives]") {
  CHECK(ParseError("#!/bin/sh\n#MLSUB -n 2\n#MLSUB --gpus-per-tsk 1\necho hi\n") ==
        "job.sh:3: unknown option '--gpus-per-tsk' in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB -x\n") == "job.sh:2: unknown option '-x' in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n\n#MLSUB -n\n") == "job.sh:3: option -n needs a value (N) in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB -n two\n") == "job.sh:2: --ntasks in #MLSUB directive: 'two' is not an integer");
  CHECK_THAT(ParseError("#!/bin/sh\n#MLSUB --mem-per-task 4X\n"),
             Catch::StartsWith("job.sh:2: --mem-per-task in #MLSUB directive: ") && Catch::Contains("4X"));
  CHECK_THAT(ParseError("#!/bin/sh\n#MLSUB -t soon\n"), Catch::StartsWith("job.sh:2: --time in #MLSUB directive: "));
  CHECK(ParseError("#!/bin/sh\n#MLSUB -H yes\n") ==
        "job.sh:2: unexpected argument 'yes' in #MLSUB directive (only options are allowed)");
  CHECK(ParseError("#!/bin/sh\n#MLSUB --hold=yes\n") == "job.sh:2: option --hold takes no value in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB --wrap 'echo hi'\n") == "job.sh:2: option --wrap is not allowed in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB --parsable\n") == "job.sh:2: option --parsable is not allowed in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB --submission-key k1\n") ==
        "job.sh:2: option --submission-key is not allowed in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB -J 'open\n") == "job.sh:2: unterminated ' quote in #MLSUB directive");
  CHECK(ParseError("#!/bin/sh\n#MLSUB --gpu-types a,,b\n") ==
        "job.sh:2: --gpu-types in #MLSUB directive: empty GPU type in 'a,,b'");
}

TEST_CASE("the command line overrides directives, and directive values keep their line in errors", "[cli][directives]") {
  auto read = [](const std::string& script) {
    return [script](const std::string&) {
      mlsched::Parsed<std::string> p;
      p.value = script;
      return p;
    };
  };
  SubmitContext ctx{"/home/u", {}, std::nullopt};
  auto args = ParseSubmitArgs({"-n", "3", "job.sh"});
  REQUIRE(args);
  auto sub = PrepareSubmission(*args.value, ctx, read("#!/bin/sh\n#MLSUB -n 2 -J fromfile\ntrue\n"), [] { return ""; });
  REQUIRE(sub);
  CHECK(sub.value->spec.ntasks() == 3);
  CHECK(sub.value->spec.name() == "fromfile");

  args = ParseSubmitArgs({"job.sh"});
  sub = PrepareSubmission(*args.value, ctx, read("#!/bin/sh\n#MLSUB -J ok\n#MLSUB -n 0\ntrue\n"), [] { return ""; });
  REQUIRE_FALSE(sub);
  CHECK(sub.error == "job.sh:3: --ntasks must be >= 1 (got 0)");

  // The command line fixes what the directive got wrong, and the error would name no line.
  args = ParseSubmitArgs({"-n", "0", "job.sh"});
  sub = PrepareSubmission(*args.value, ctx, read("#!/bin/sh\n#MLSUB -n 4\ntrue\n"), [] { return ""; });
  REQUIRE_FALSE(sub);
  CHECK(sub.error == "--ntasks must be >= 1 (got 0)");
}

TEST_CASE("directives in a script read from stdin are named 'stdin'", "[cli][directives]") {
  auto args = ParseSubmitArgs({});
  REQUIRE(args);
  auto sub = PrepareSubmission(*args.value, SubmitContext{"/tmp", {}, std::nullopt}, nullptr,
                               [] { return std::string("#!/bin/sh\n#MLSUB --bogus\n"); });
  REQUIRE_FALSE(sub);
  CHECK(sub.error == "stdin:2: unknown option '--bogus' in #MLSUB directive");
}
