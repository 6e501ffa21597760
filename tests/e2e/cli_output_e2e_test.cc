// End-to-end: terminal escape sequences written by a user (job name, partition), an operator
// (drain reason) or a policy file reach the terminals of mlq, mladmin and mlsub only escaped.
// Where schedd refuses such text at submit, the refusal itself must print escaped.
#include <catch2/catch.hpp>

#include <fstream>

#include "tests/e2e/cluster.h"

using namespace mlsched::e2e;

namespace {

// OSC (retitles the window), a screen clear and a UTF-8 C1 CSI: valid UTF-8 without line breaks,
// so neither mlsub's local checks nor protobuf's UTF-8 check stop it before schedd.
const std::string kHostile = "\x1b]0;pwned\x07\x1b[2J\xc2\x9b" "0m";
const std::string kEscaped = "\\x1b]0;pwned\\x07\\x1b[2J\\u009b0m";

// No byte a terminal acts on but newlines: no C0 control, no DEL, no C1 CSI.
bool Inert(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b < 0x20 && b != '\n') || b == 0x7f) return false;
    if (b == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("escape sequences in names, reasons and policy errors reach no terminal raw", "[e2e][security]") {
  Cluster c("# e2e: terminal escapes\n");
  c.StartAgent("a1", 1);

  auto sub = c.Tool("mlsub", {"--parsable", "-H", "-J", kHostile, "--wrap", "true"});
  INFO(sub.err);
  if (sub.exit_code == 0) {  // schedd stored the name: every view prints it escaped
    const std::string id = sub.out.substr(0, sub.out.find('\n'));
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"mlq"}, {"mlq", "-o", "%i %j %.40j"}, {"mladmin", "show", "job", id}, {"mlq", "--explain", id}}) {
      auto r = c.Tool(args[0], std::vector<std::string>(args.begin() + 1, args.end()));
      INFO(args[0] << " " << args.back());
      CHECK(r.exit_code == 0);
      CHECK(Inert(r.out));
      CHECK(r.out.find("\\x1b]0;pwned") != std::string::npos);
    }
    CHECK(c.Tool("mlq", {"-h", "-o", "%j"}).out == kEscaped + "\n");
    auto json = c.Tool("mlq", {"--json"});
    CHECK(Inert(json.out));
    CHECK(c.Job(std::stoll(id))["name"] == kHostile);  // JSON keeps the value exactly
  } else {  // schedd refuses control characters at submit: the refusal is escaped too
    CHECK(sub.exit_code == 1);
    CHECK(Inert(sub.err));
  }

  auto bad = c.Tool("mlsub", {"-p", kHostile, "--wrap", "true"});  // schedd's refusal may quote it
  CHECK(bad.exit_code == 1);
  CHECK(Inert(bad.err));

  auto drain = c.Tool("mladmin", {"drain", "a1", "--reason", kHostile});
  if (drain.exit_code == 0) {
    auto nodes = c.Tool("mladmin", {"nodes"});
    CHECK(Inert(nodes.out));
    CHECK(nodes.out.find(kEscaped) != std::string::npos);
  } else {
    CHECK(Inert(drain.err));
  }

  std::ofstream(c.PolicyFile()) << "\"\\u001b]0;pwned\\u0007\\u001b[2J\" = 1\n";  // an unknown key, quoted back
  auto reload = c.Tool("mladmin", {"policy", "reload"});
  CHECK(reload.exit_code == 1);
  CHECK(Inert(reload.err));
  CHECK(reload.err.find("\\x1b]0;pwned\\x07\\x1b[2J") != std::string::npos);
}
