// The policy keys of submit-time associations: [[accounts]] users and allow_qos, [[partitions]]
// allow_accounts and allow_qos, [[users]] default_account, enforce_associations; the lines they
// were written on (cited by schedd's refusals) and every error as FILE:LINE:COL.
#include <catch2/catch.hpp>

#include "schedd/core/types.h"
#include "schedd/policy/policy_loader.h"

using namespace mlsched;
using policy::ParsePolicy;

TEST_CASE("association keys are read with the lines they were written on", "[policy][associations]") {
  auto r = ParsePolicy(
      "default_qos = \"normal\"\n"                                    // 1
      "[[qos]]\nname = \"normal\"\n[[qos]]\nname = \"high\"\n"        // 2-5
      "[[partitions]]\nname = \"default\"\n"                          // 6-7
      "allow_accounts = [\"physics\"]\nallow_qos = [\"normal\"]\n"    // 8-9
      "[[accounts]]\nname = \"physics\"\nusers = [\"bob\", \"carol\"]\n"  // 10-12
      "allow_qos = [\"normal\", \"high\"]\n"                          // 13
      "[[accounts]]\nname = \"bio\"\nusers = { alice = 3 }\n"         // 14-16
      "[[users]]\nname = \"bob\"\ndefault_account = \"physics\"\n",   // 17-19
      "cluster.toml");
  INFO(r.ErrorText());
  REQUIRE(r.ok());
  const core::PolicySet& p = *r.policy;
  CHECK(p.enforce_associations);  // the default: enforced
  REQUIRE(p.partitions.size() == 1);
  CHECK(p.partitions[0].allow_accounts == std::vector<std::string>{"physics"});
  CHECK(p.partitions[0].allow_qos == std::vector<std::string>{"normal"});
  CHECK(p.partitions[0].source.entry == "cluster.toml:6");
  CHECK(p.partitions[0].source.Of("allow_accounts") == "cluster.toml:8");
  CHECK(p.partitions[0].source.Of("allow_qos") == "cluster.toml:9");
  REQUIRE(p.accounts.size() == 2);
  CHECK(p.accounts[0].user_shares == std::map<std::string, int64_t>{{"bob", 1}, {"carol", 1}});  // a list: 1 share each
  CHECK(p.accounts[0].allow_qos == std::vector<std::string>{"normal", "high"});
  CHECK(p.accounts[0].source.Of("users") == "cluster.toml:12");
  CHECK(p.accounts[0].source.Of("allow_qos") == "cluster.toml:13");
  CHECK(p.accounts[1].user_shares.at("alice") == 3);  // a table: user = shares, as before
  CHECK(p.accounts[1].source.Of("allow_qos") == "cluster.toml:14");  // absent key: the entry's line
  REQUIRE(p.users.size() == 1);
  CHECK(p.users[0].name == "bob");
  CHECK(p.users[0].default_account == "physics");
  CHECK(p.users[0].source.entry == "cluster.toml:17");

  auto off = ParsePolicy("enforce_associations = false\n", "p.toml");
  REQUIRE(off.ok());
  CHECK_FALSE(off.policy->enforce_associations);
  CHECK(ParsePolicy("", "p.toml").policy->enforce_associations);
}

TEST_CASE("association errors name the entry and key as FILE:LINE:COL", "[policy][associations]") {
  struct Row { const char* what; const char* text; std::vector<std::string> errors; };
  std::vector<Row> table{
      {"partition allows an unknown account",
       "[[accounts]]\nname = \"physics\"\n[[partitions]]\nname = \"default\"\nallow_accounts = [\"physics\", \"phys\"]\n",
       {"p.toml:5:30: [[partitions]] #1: 'allow_accounts' names account 'phys', which is not a defined account"}},
      {"partition allows a QoS but there are none",
       "[[partitions]]\nname = \"default\"\nallow_qos = [\"high\"]\n",
       {"p.toml:3:14: [[partitions]] #1: 'allow_qos' names QoS 'high', which is not a defined QoS (the policy "
        "defines no [[qos]])"}},
      {"account allows an unknown QoS",
       "[[qos]]\nname = \"normal\"\n[[accounts]]\nname = \"a\"\nallow_qos = [\"hihg\"]\n",
       {"p.toml:5:14: [[accounts]] #1: 'allow_qos' names QoS 'hihg', which is not a defined QoS"}},
      {"users of the wrong type", "[[accounts]]\nname = \"a\"\nusers = \"alice\"\n",
       {"p.toml:3:9: [[accounts]] #1: 'users' must be an array of user names or a table of user = shares"}},
      {"a user name that is not a string", "[[accounts]]\nname = \"a\"\nusers = [\"alice\", 7]\n",
       {"p.toml:3:19: [[accounts]] #1: 'users' must list user names (strings)"}},
      {"default account not defined", "[[users]]\nname = \"alice\"\ndefault_account = \"physics\"\n",
       {"p.toml:3:19: [[users]] #1: default_account 'physics' is not a defined account"}},
      {"default account that does not list the user",
       "[[accounts]]\nname = \"physics\"\nusers = [\"bob\"]\n[[users]]\nname = \"alice\"\ndefault_account = \"physics\"\n",
       {"p.toml:6:19: [[users]] #1: default_account 'physics' does not list user 'alice' in its users (p.toml:3), "
        "so alice could not use it"}},
      {"a user twice and unknown keys",
       "[[users]]\nname = \"alice\"\n[[users]]\nname = \"alice\"\ndefault_acount = \"x\"\n",
       {"p.toml:5:1: unknown key 'default_acount' in [[users]] #2; expected one of: name, default_account",
        "p.toml:3:1: [[users]] #2: duplicate user 'alice'"}},
      {"a user without a name", "[[users]]\ndefault_account = \"x\"\n[[accounts]]\nname = \"x\"\n",
       {"p.toml:1:1: [[users]] #1: 'name' is required"}},
      {"enforce_associations not a boolean", "enforce_associations = \"yes\"\n",
       {"p.toml:1:24: 'enforce_associations' in the top level: expected true or false, got a string"}},
  };
  for (const Row& row : table) {
    SECTION(row.what) {
      auto r = ParsePolicy(row.text, "p.toml");
      CHECK_FALSE(r.ok());
      std::vector<std::string> got;
      for (const auto& e : r.errors) got.push_back(e.ToString());
      CHECK(got == row.errors);
    }
  }
}

TEST_CASE("a permissive policy may name a default account that does not list the user", "[policy][associations]") {
  auto r = ParsePolicy("enforce_associations = false\n[[accounts]]\nname = \"physics\"\n"
                       "[[users]]\nname = \"alice\"\ndefault_account = \"physics\"\n",
                       "p.toml");
  INFO(r.ErrorText());
  CHECK(r.ok());
}
