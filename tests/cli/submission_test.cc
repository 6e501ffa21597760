// mlsub's command line, payload selection, defaults and local validation.
#include <catch2/catch.hpp>

#include "cli/exit_codes.h"
#include "cli/submission.h"
#include "cli/submit_options.h"

using namespace mlsched;
using namespace mlsched::cli;

namespace {

const SubmitContext kCtx{"/home/alice/proj", {{"PATH", "/usr/bin"}, {"HOME", "/home/alice"}}, std::nullopt};

SubmitArgs Args(const std::vector<std::string>& args) {
  auto r = ParseSubmitArgs(args);
  INFO(r.error);
  REQUIRE(r);
  return *r.value;
}

Parsed<Submission> Prepare(const std::vector<std::string>& args, const std::string& script = "#!/bin/sh\ntrue\n") {
  auto read = [script](const std::string& path) {
    Parsed<std::string> p;
    if (path == "missing.sh") p.error = "cannot read script 'missing.sh': No such file or directory";
    else p.value = script;
    return p;
  };
  return PrepareSubmission(Args(args), kCtx, read, [script] { return script; });
}

v1::JobSpec Spec(const std::vector<std::string>& args, const std::string& script = "#!/bin/sh\ntrue\n") {
  auto r = Prepare(args, script);
  INFO(r.error);
  REQUIRE(r);
  return r.value->spec;
}

std::string Error(const std::vector<std::string>& args, const std::string& script = "#!/bin/sh\ntrue\n") {
  auto r = Prepare(args, script);
  REQUIRE_FALSE(r);
  return r.error;
}

}  // namespace

TEST_CASE("options take values in every spelling", "[cli][submit]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-J", "x", "-n", "4"}, {"-Jx", "-n4"}, {"--job-name=x", "--ntasks=4"}, {"--job-name", "x", "--ntasks", "4"}}) {
    auto a = Args(args);
    CHECK(*a.options.job_name == "x");
    CHECK(*a.options.ntasks == 4);
  }
  CHECK(*Args({"--gpu-type", "L4"}).options.gpu_types == std::vector<std::string>{"l4"});
  CHECK(*Args({"--gpu-types=h100,a100,h100"}).options.gpu_types == std::vector<std::string>{"h100", "a100"});
}

TEST_CASE("option parsing stops at the script, and a double dash starts the command", "[cli][submit]") {
  auto a = Args({"-n", "2", "job.sh", "-n", "3"});
  CHECK(*a.options.ntasks == 2);
  CHECK(a.positionals == std::vector<std::string>{"job.sh", "-n", "3"});
  CHECK_FALSE(a.has_command);
  a = Args({"-n", "2", "--", "python", "-u", "train.py"});
  CHECK(a.has_command);
  CHECK(a.command == std::vector<std::string>{"python", "-u", "train.py"});
  CHECK(a.positionals.empty());
}

TEST_CASE("command-line errors name the option", "[cli][submit]") {
  CHECK(ParseSubmitArgs({"--gpus-per-tsk", "1"}).error == "unknown option '--gpus-per-tsk'");
  CHECK(ParseSubmitArgs({"-Z"}).error == "unknown option '-Z'");
  CHECK(ParseSubmitArgs({"-n"}).error == "option -n needs a value (N)");
  CHECK(ParseSubmitArgs({"--ntasks", "x"}).error == "--ntasks: 'x' is not an integer");
  CHECK(ParseSubmitArgs({"--parsable=1"}).error == "option --parsable takes no value");
  CHECK_THAT(ParseSubmitArgs({"-c", "lots"}).error, Catch::StartsWith("--cpus-per-task: "));
}

TEST_CASE("defaults: one task, one CPU, the current directory, named after the script", "[cli][submit]") {
  auto s = Spec({"/path/to/train.sh"});
  CHECK(s.ntasks() == 1);
  CHECK(s.cpu_millis_per_task() == 1000);
  CHECK(s.memory_bytes_per_task() == 0);
  CHECK(s.gpus_per_task() == 0);
  CHECK(s.time_limit_s() == 0);
  CHECK(s.workdir() == "/home/alice/proj");
  CHECK(s.name() == "train.sh");
  CHECK(s.script() == "#!/bin/sh\ntrue\n");
  CHECK(s.argv().empty());
  CHECK_FALSE(s.hold());
  CHECK(s.env().at("PATH") == "/usr/bin");  // --export=ALL
  CHECK(s.partition().empty());             // schedd picks the default partition
}

TEST_CASE("units: fractional CPUs, Slurm memory and time formats", "[cli][submit]") {
  auto s = Spec({"-c", "0.5", "--mem-per-task", "512", "-t", "2-00:00:00", "--gpus-per-task", "1", "--gpu-types",
                 "H100", "x.sh"});
  CHECK(s.cpu_millis_per_task() == 500);
  CHECK(s.memory_bytes_per_task() == int64_t{512} << 20);  // a bare number is MB
  CHECK(s.time_limit_s() == 2 * 86400);
  CHECK(s.gpus_per_task() == 1);
  REQUIRE(s.gpu_types_size() == 1);
  CHECK(s.gpu_types(0) == "h100");
  CHECK(Spec({"-c", "1500m", "x.sh"}).cpu_millis_per_task() == 1500);
  CHECK(Spec({"-t", "30", "x.sh"}).time_limit_s() == 1800);  // minutes, like sbatch
}

TEST_CASE("wrap and command payloads become a script or argv", "[cli][submit]") {
  auto w = Spec({"--wrap", "echo $RANK"});
  CHECK(w.script() == "#!/bin/sh\necho $RANK\n");
  CHECK(w.name() == "wrap");
  auto c = Spec({"-J", "t", "--", "/usr/bin/python3", "train.py", "--lr", "0.1"});
  CHECK(c.script().empty());
  CHECK(std::vector<std::string>(c.argv().begin(), c.argv().end()) ==
        std::vector<std::string>{"/usr/bin/python3", "train.py", "--lr", "0.1"});
  CHECK(c.name() == "t");
  CHECK(Spec({"--", "python3", "x.py"}).name() == "python3");
}

TEST_CASE("a script from stdin when neither a script nor a command is given", "[cli][submit]") {
  auto s = Spec({"-n", "2"}, "#!/bin/bash\n#MLSUB -J piped\necho hi\n");
  CHECK(s.script() == "#!/bin/bash\n#MLSUB -J piped\necho hi\n");
  CHECK(s.name() == "piped");
  CHECK(s.ntasks() == 2);
  CHECK(Spec({}, "#!/bin/sh\ntrue\n").name() == "mlsub");
}

TEST_CASE("the working directory is made absolute against the current directory", "[cli][submit]") {
  CHECK(Spec({"-D", "out/../runs/", "x.sh"}).workdir() == "/home/alice/proj/runs");
  CHECK(Spec({"-D", "/scratch/x/", "x.sh"}).workdir() == "/scratch/x");
  CHECK(Spec({"-D", "/", "x.sh"}).workdir() == "/");
}

TEST_CASE("payload errors", "[cli][submit]") {
  CHECK(Error({"--wrap", "true", "x.sh"}) == "give only one of: a script file, --wrap CMD, or -- CMD ARGS");
  CHECK(Error({"--wrap", "true", "--", "ls"}) == "give only one of: a script file, --wrap CMD, or -- CMD ARGS");
  CHECK_THAT(Error({"x.sh", "arg1"}), Catch::StartsWith("arguments after the script 'x.sh' are not supported (got 'arg1')"));
  CHECK(Error({"--"}) == "nothing to run after '--'");
  CHECK(Error({"--wrap", "  "}) == "--wrap needs a command");
  CHECK(Error({"missing.sh"}) == "cannot read script 'missing.sh': No such file or directory");
  CHECK(Error({"x.sh"}, "echo no shebang\n") ==
        "x.sh:1: a batch script must start with '#!' and an interpreter (e.g. #!/bin/sh)");
  CHECK(Error({"x.sh"}, "") == "x.sh: the batch script is empty");
  CHECK(Error({}, "") == "stdin: the batch script is empty");
}

TEST_CASE("local validation names the option and the bad value", "[cli][submit]") {
  CHECK(Error({"-n", "0", "--wrap", "true"}) == "--ntasks must be >= 1 (got 0)");
  CHECK(Error({"-n", "-3", "--wrap", "true"}) == "--ntasks must be >= 1 (got -3)");
  CHECK(Error({"-n", "100001", "--wrap", "true"}) == "--ntasks must be <= 100000 (got 100001)");
  CHECK(Error({"-c", "0", "--wrap", "true"}) == "--cpus-per-task must be > 0 (got 0)");
  CHECK(Error({"-c", "5000", "--wrap", "true"}) == "--cpus-per-task must be <= 4096 (got 5000)");
  CHECK(Error({"--mem-per-task", "100T", "--wrap", "true"}) == "--mem-per-task must be <= 64T (got 100T)");
  CHECK(Error({"--mem-per-task", "0", "--wrap", "true"}) == "--mem-per-task must be > 0 (got 0 bytes)");
  CHECK(Error({"--gpus-per-task", "2000", "--wrap", "true"}) == "--gpus-per-task must be in [0, 1024] (got 2000)");
  CHECK(Error({"--gpus-per-task", "-1", "--wrap", "true"}) == "--gpus-per-task must be in [0, 1024] (got -1)");
  CHECK(Error({"--gpu-types", "h100", "--wrap", "true"}) == "--gpu-types needs --gpus-per-task >= 1");
  CHECK(Error({"-t", "400-00:00:00", "--wrap", "true"}) == "--time must be at most 365-00:00:00 (got 400-00:00:00)");
  CHECK(Error({"--topology", "rack", "--wrap", "true"}) ==
        "--topology must be none, domain, zone, region or spread (got 'rack')");
  CHECK_THAT(Error({"--nice", "3000000000", "--wrap", "true"}), Catch::StartsWith("--nice must be in ["));
  CHECK(Error({"-J", "", "--wrap", "true"}) == "--job-name must not be empty");
  CHECK(Error({"-J", "a\nb", "--wrap", "true"}) == "--job-name must not contain tabs or line breaks");
  // Sizes that might fit a real cluster are left to schedd, which knows the nodes.
  CHECK(Spec({"-c", "64", "--gpus-per-task", "9", "--wrap", "true"}).gpus_per_task() == 9);
}

TEST_CASE("the remaining options reach the spec", "[cli][submit]") {
  auto s = Spec({"-p", "gpu", "-A", "lab", "--qos", "low", "-o", "o-%j.txt", "-e", "e-%t.txt", "-H", "--topology",
                 "spread", "--nice", "50", "x.sh"});
  CHECK(s.partition() == "gpu");
  CHECK(s.account() == "lab");
  CHECK(s.qos() == "low");
  CHECK(s.stdout_pattern() == "o-%j.txt");
  CHECK(s.stderr_pattern() == "e-%t.txt");
  CHECK(s.hold());
  CHECK(s.topology() == "spread");
  CHECK(s.nice() == 50);
  auto sub = Prepare({"--parsable", "--server", "unix:/tmp/s.sock", "x.sh"});
  REQUIRE(sub);
  CHECK(sub.value->options.parsable);
  CHECK(*sub.value->options.server == "unix:/tmp/s.sock");
}

TEST_CASE("mlsub --submission-key takes the key an unconfirmed mlsub printed, checked as schedd checks it", "[cli][submit]") {
  const std::string key = "0123456789abcdef0123456789abcdef";
  auto sub = Prepare({"--submission-key", key, "x.sh"});
  REQUIRE(sub);
  CHECK(*sub.value->options.submission_key == key);
  CHECK_FALSE(Prepare({"x.sh"}).value->options.submission_key);
  const std::string err = "--submission-key must be 1 to 64 letters, digits, '-', '_' or '.'";
  for (const std::string& bad : {std::string(""), std::string(65, 'a'), std::string("a b"), std::string("k\x1b[2J"),
                                std::string("../k"), std::string("k;rm")})
    CHECK_THAT(ParseSubmitArgs({"--submission-key", bad, "x.sh"}).error, Catch::Contains(err));
  CHECK(ParseSubmitArgs({"--submission-key", std::string(64, 'a'), "x.sh"}));
}

TEST_CASE("an unconfirmed submission is told apart from a refused one, with the key to submit it again",
          "[cli][submit]") {
  CHECK(IsUnconfirmed(4));   // DEADLINE_EXCEEDED
  CHECK(IsUnconfirmed(14));  // UNAVAILABLE
  for (int code : {0, 3, 7, 8, 9, 13})  // OK, INVALID_ARGUMENT, PERMISSION_DENIED, RESOURCE_EXHAUSTED, ..., INTERNAL
    CHECK_FALSE(IsUnconfirmed(code));
  CHECK_THAT(UnconfirmedSubmissionHelp("abc"), Catch::Contains("--submission-key abc"));
}

TEST_CASE("the help lists every option", "[cli][submit]") {
  std::string help = SubmitOptionsHelp();
  for (const auto& d : SubmitOptionTable()) CHECK_THAT(help, Catch::Contains("--" + d.long_names[0]));
  CHECK_THAT(help, Catch::Contains("-n, --ntasks N"));
}

TEST_CASE("mlsub --fallback: accelerator tiers with their waits in order", "[cli][submit]") {
  auto s = Spec({"--gpus-per-task", "8", "--gpu-types", "h100", "--fallback", "A100@10m,cpu@1h", "x.sh"});
  REQUIRE(s.fallback_size() == 2);
  CHECK(s.fallback(0).accelerator() == "a100");
  CHECK(s.fallback(0).after_s() == 600);
  CHECK(s.fallback(1).accelerator() == "cpu");
  CHECK(s.fallback(1).after_s() == 3600);
  CHECK(Error({"--fallback", "a100@10m", "x.sh"}).find("--fallback needs --gpus-per-task >= 1") != std::string::npos);
  CHECK(ParseSubmitArgs({"--gpus-per-task", "1", "--fallback", "a100", "x.sh"}).error ==
        "--fallback: expected TYPE@WAIT in 'a100' (e.g. a100@10m,cpu@1h)");
  CHECK(ParseSubmitArgs({"--fallback", "cpu@1h,a100@10m", "x.sh"}).error.find("in order of their wait") !=
        std::string::npos);
}

TEST_CASE("dependencies and arrays go to the spec as written, checked first", "[cli][submit]") {
  auto spec = Spec({"-d", "afterok:12:13_2,singleton", "--array=0-99%10"});
  CHECK(spec.dependency() == "afterok:12:13_2,singleton");
  CHECK(spec.array() == "0-99%10");
  CHECK(Spec({"-a", "1,3,5-11:2"}).array() == "1,3,5-11:2");
  CHECK_THAT(ParseSubmitArgs({"-d", "aftre:1"}).error, Catch::Contains("unknown dependency type 'aftre'"));
  CHECK_THAT(ParseSubmitArgs({"--array", "5-1"}).error, Catch::Contains("ends before it starts"));
  // In a directive, the error points at the line.
  CHECK_THAT(Error({"job.sh"}, "#!/bin/sh\n#MLSUB --array=0-9%0\ntrue\n"), Catch::Contains("job.sh:2"));
}

TEST_CASE("spot, checkpoint interval and data locality go to the spec", "[cli][submit]") {
  auto spec = Spec({"--spot", "prefer", "--checkpoint-interval", "10m", "--data-region", "eu-west", "--data-size", "500G",
                    "--region-strict"});
  CHECK(spec.spot() == "prefer");
  CHECK(spec.checkpoint_interval_s() == 600);
  CHECK(spec.data_region() == "eu-west");
  CHECK(spec.data_bytes() == int64_t{500} << 30);
  CHECK(spec.region_strict());
  CHECK(Spec({}).spot().empty());  // schedd decides: allow when it checkpoints, else never
  CHECK_THAT(ParseSubmitArgs({"--spot", "sometimes"}).error, Catch::Contains("expected never, allow or prefer"));
  CHECK_THAT(Error({"--region-strict"}), Catch::Contains("--region-strict needs --data-region"));
}

TEST_CASE("mlsub -n MIN-MAX[:STEP] submits an elastic gang, and -n N stays rigid", "[cli][submit][elastic]") {
  v1::JobSpec s = Spec({"-n", "2-4", "x.sh"});
  CHECK(s.ntasks() == 4);
  CHECK(s.min_tasks() == 2);
  CHECK(s.task_step() == 1);
  s = Spec({"--ntasks=2-8:2", "x.sh"});
  CHECK(s.ntasks() == 8);
  CHECK(s.min_tasks() == 2);
  CHECK(s.task_step() == 2);
  s = Spec({"-n", "2-4", "-n", "4", "x.sh"});  // a later -n N makes it rigid again
  CHECK(s.ntasks() == 4);
  CHECK(s.min_tasks() == 0);
  CHECK(Spec({"--ntasks=4", "x.sh"}).min_tasks() == 0);
  // The #MLSUB directive form, and the command line laid over it.
  s = Spec({"x.sh"}, "#!/bin/sh\n#MLSUB -n 3-6:3\ntrue\n");
  CHECK(s.ntasks() == 6);
  CHECK(s.min_tasks() == 3);
  CHECK(s.task_step() == 3);
  CHECK(Spec({"-n", "5", "x.sh"}, "#!/bin/sh\n#MLSUB -n 3-6:3\ntrue\n").min_tasks() == 0);
}

TEST_CASE("a bad -n range is refused with an error naming --ntasks", "[cli][submit][elastic]") {
  CHECK(ParseSubmitArgs({"-n", "2-x"}).error == "--ntasks: '2-x' is not N, MIN-MAX or MIN-MAX:STEP");
  CHECK(ParseSubmitArgs({"-n", "2-4:"}).error == "--ntasks: '2-4:' is not N, MIN-MAX or MIN-MAX:STEP");
  CHECK(Error({"-n", "0-4", "x.sh"}) == "--ntasks 0-4: MIN must be >= 1 (got 0)");
  CHECK(Error({"-n", "5-4", "x.sh"}) == "--ntasks 5-4: MIN must be <= MAX");
  CHECK(Error({"-n", "2-8:0", "x.sh"}) == "--ntasks 2-8: STEP must be >= 1 (got 0)");
  CHECK(Error({"-n", "2-7:2", "x.sh"}) == "--ntasks 2-7:2: MAX - MIN must be a multiple of STEP");
  CHECK(Error({"-n", "1-100001", "x.sh"}) == "--ntasks must be <= 100000 (got 100001)");
  CHECK(Error({"x.sh"}, "#!/bin/sh\n#MLSUB -n 4-2\ntrue\n") == "x.sh:2: --ntasks 4-2: MIN must be <= MAX");
}

TEST_CASE("mlsub --container-*: pyxis's options reach the spec, the image in canonical form", "[cli][submit][container]") {
  auto s = Spec({"--container-image", "nvcr.io#nvidia/pytorch:24.05-py3", "--container-mounts",
                 "/data:/data:ro,/scratch/alice:/scratch", "--container-workdir", "/workspace", "--container-env",
                 "HF_TOKEN,WANDB_API_KEY", "--container-writable", "--no-container-mount-home", "job.sh"});
  REQUIRE(s.has_container());
  const auto& c = s.container();
  CHECK(c.image() == "docker://nvcr.io/nvidia/pytorch:24.05-py3");
  REQUIRE(c.mounts_size() == 2);
  CHECK(c.mounts(0).source() == "/data");
  CHECK(c.mounts(0).read_only());
  CHECK(c.mounts(1).target() == "/scratch");
  CHECK_FALSE(c.mounts(1).read_only());
  CHECK(c.workdir() == "/workspace");
  CHECK(std::vector<std::string>(c.env().begin(), c.env().end()) == std::vector<std::string>{"HF_TOKEN", "WANDB_API_KEY"});
  CHECK(c.writable());
  CHECK(c.has_mount_home());
  CHECK_FALSE(c.mount_home());
  // Defaults: read-only image, the home directory mounted (unset: the node's default).
  auto d = Spec({"--container-image=busybox", "job.sh"});
  CHECK(d.container().image() == "docker://docker.io/library/busybox:latest");
  CHECK_FALSE(d.container().writable());
  CHECK_FALSE(d.container().has_mount_home());
  CHECK_FALSE(Spec({"job.sh"}).has_container());
}

TEST_CASE("mlsub --container-*: bad values and orphan options are refused, naming the option", "[cli][submit][container]") {
  auto parse_error = [](const std::vector<std::string>& args) { return ParseSubmitArgs(args).error; };
  CHECK_THAT(parse_error({"--container-image", "dir:/tmp/x", "job.sh"}),
             Catch::StartsWith("--container-image: unknown image transport 'dir:'"));
  CHECK_THAT(parse_error({"--container-image", "Ubuntu", "job.sh"}), Catch::Contains("must be lowercase"));
  CHECK(parse_error({"--container-image", "busybox", "--container-mounts", "/a:rel", "job.sh"}) ==
        "--container-mounts: mount target 'rel' must be an absolute path");
  CHECK(parse_error({"--container-image", "busybox", "--container-workdir", "work", "job.sh"}) ==
        "--container-workdir: container workdir 'work' must be an absolute path");
  CHECK_THAT(parse_error({"--container-image", "busybox", "--container-env", "A-B", "job.sh"}),
             Catch::StartsWith("--container-env: "));
  CHECK(Error({"--container-mounts", "/data", "job.sh"}) == "--container-mounts needs --container-image");
  CHECK(Error({"--container-writable", "job.sh"}) == "--container-writable needs --container-image");
  // In a directive, the error names the script's line.
  CHECK(Error({"job.sh"}, "#!/bin/sh\n#MLSUB --container-image busybox\n#MLSUB --container-mounts /etc:/proc\ntrue\n")
            .find("job.sh:3: --container-mounts in #MLSUB directive: mount target '/proc' is under /proc") !=
        std::string::npos);
  auto s = Spec({"job.sh"}, "#!/bin/sh\n#MLSUB --container-image busybox:1.36 --container-mounts /data\ntrue\n");
  CHECK(s.container().image() == "docker://docker.io/library/busybox:1.36");
  CHECK(s.container().mounts(0).target() == "/data");
}
