// Internal: walks a parsed TOML table into core::PolicySet, collecting every error with its
// position. Used by policy_loader.cc.
#pragma once

#include <toml++/toml.h>

#include <functional>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "schedd/core/types.h"
#include "schedd/policy/policy_loader.h"

namespace mlsched::policy {

class PolicyReader {
 public:
  explicit PolicyReader(std::string file) : file_(std::move(file)) {}
  /// Reads the whole policy; errors() lists every problem (then the result must be discarded).
  core::PolicySet Read(const toml::table& root);
  const std::vector<PolicyError>& errors() const { return errors_; }
  /// The [simulation] table read by Read() (defaults when the file has none).
  const SimulationSettings& simulation() const { return simulation_; }

 private:
  void Error(const toml::source_region& where, std::string message);
  /// Reports keys of `table` not in `allowed` (`context` names the table, e.g. "[backfill]").
  void CheckKeys(const toml::table& table, std::initializer_list<const char*> allowed,
                 const std::string& context);
  // Typed getters: leave `out` unchanged when the key is absent; report a wrong type or range.
  void Int(const toml::table& t, const char* key, int64_t& out, int64_t min, const std::string& ctx);
  void Int32(const toml::table& t, const char* key, int32_t& out, int64_t min, const std::string& ctx);
  void Dur(const toml::table& t, const char* key, core::Duration& out, const std::string& ctx);
  void Str(const toml::table& t, const char* key, std::string& out, const std::string& ctx);
  void Bool(const toml::table& t, const char* key, bool& out, const std::string& ctx);
  /// A number >= 0 (integer or float).
  void Num(const toml::table& t, const char* key, double& out, const std::string& ctx);
  void StrList(const toml::table& t, const char* key, std::vector<std::string>& out,
               const std::string& ctx);
  /// Calls `fn(table, context)` for every table of the array of tables `key` ([[key]]).
  void EachTable(const toml::table& root, const char* key,
                 const std::function<void(const toml::table&, const std::string&)>& fn);

  void ReadScheduler(const toml::table& t, core::PolicySet& p);
  void ReadLimits(const toml::table& t, core::InputLimits& l);
  void ReadBackfill(const toml::table& t, core::BackfillPolicy& b);
  void ReadPriority(const toml::table& t, core::PriorityWeights& w);
  void ReadFairshare(const toml::table& t, core::FairsharePolicy& f);
  core::PartitionPolicy ReadPartition(const toml::table& t, const std::string& ctx);
  core::QosPolicy ReadQos(const toml::table& t, const std::string& ctx);
  core::AccountPolicy ReadAccount(const toml::table& t, const std::string& ctx);
  void CheckReferences(const toml::table& root, const core::PolicySet& p);
  // association_reader.cc
  /// "FILE:LINE" of a position.
  std::string Line(const toml::source_region& where) const;
  /// Records the lines of the entry `t` and of those of `keys` it has.
  void KeepLines(const toml::table& t, std::initializer_list<const char*> keys, core::SourceLines& out);
  /// An account's `users`: an array of names (1 share each) or a table of user = shares.
  void ReadAccountUsers(const toml::table& t, const std::string& ctx, core::AccountPolicy& a);
  core::UserPolicy ReadUser(const toml::table& t, const std::string& ctx);
  /// Reports every name in the string array `key` of `t` that is not in `defined` (`what`: "account", "QoS").
  void CheckNames(const toml::table& t, const char* key, const std::set<std::string>& defined,
                  const std::string& what, const std::string& ctx);
  /// allow_accounts / allow_qos name defined accounts and QoS; [[users]] are unique and their
  /// default accounts exist (and, when enforced, list them).
  void CheckAssociations(const toml::table& root, const core::PolicySet& p);
  // placement_reader.cc
  void ReadPlacement(const toml::table& t, core::PlacementPolicy& p);
  void ReadPricing(const toml::table& t, core::PlacementPolicy& p);
  core::WarmPool ReadWarmPool(const toml::table& t, const std::string& ctx);
  // provisioning_reader.cc
  /// [provisioning.POOL] tables: programs, max_nodes, idle_time, resume_timeout, budget, node shape.
  void ReadProvisioning(const toml::table& t, core::PolicySet& p);
  core::ProvisioningPolicy ReadProvisioningPool(const toml::table& t, core::Pool pool, const std::string& ctx);
  /// cpus, memory, gpus ("TYPE:N"), region, zone, domain, features of the nodes a pool creates.
  void ReadShape(const toml::table& t, const std::string& ctx, core::Node& shape);
  /// [inventory] (strict, over_capacity) and one [[nodes]] entry (inventory_reader.cc).
  void ReadInventory(const toml::table& t, core::NodeInventory& inv);
  void ReadNodeDeclaration(const toml::table& t, const std::string& ctx, core::NodeInventory& inv);
  /// A budget (max_cost_per_hour) needs [pricing.POOL] prices for the shape.
  void CheckProvisioning(const toml::table& root, const core::PolicySet& p);
  /// [interactive]: partitions, max_time, idle_timeout, idle_warning, idle_cpu_below, idle_gpu_below
  /// (interactive_reader.cc); the partitions are checked to exist by CheckInteractive.
  void ReadInteractive(const toml::table& t, core::InteractivePolicy& p);
  void CheckInteractive(const toml::table& root, const core::PolicySet& p);
  /// [health]: action ("drain" | "drain-and-requeue"), auto_resume, requeue_grace (health_reader.cc).
  void ReadHealth(const toml::table& t, core::HealthPolicy& p);
  /// [watchdog]: stall_after, straggler_ratio, straggler_window, drain_after, suspect_window,
  /// requeue_grace (health_reader.cc).
  void ReadWatchdog(const toml::table& t, core::WatchdogPolicy& p);
  // idle_reader.cc
  /// [idle]: the default rule, exempt_accounts, exempt_users, exempt_qos, requeue_grace, and
  /// [idle.partitions.NAME] / [idle.qos.NAME] overrides; CheckIdle: those names are defined.
  void ReadIdle(const toml::table& t, core::IdlePolicy& p);
  void ReadIdleRule(const toml::table& t, core::IdleRule& r, const std::string& ctx);
  void CheckIdle(const toml::table& root, const core::PolicySet& p);
  // simulation_reader.cc
  void ReadSimulation(const toml::table& t, SimulationSettings& s);
  /// [prediction]: enabled, predictor (a known name), history (1..64).
  void ReadPrediction(const toml::table& t, core::PredictionPolicy& p);

  std::string file_;
  std::vector<PolicyError> errors_;
  SimulationSettings simulation_;
};

}  // namespace mlsched::policy
