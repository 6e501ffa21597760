// Submit-time associations (Slurm's AccountingStorageEnforce=associations,qos and the partition
// options AllowAccounts / AllowQos): which account a job is charged to, and whether its user may
// use that account, partition and QoS. Pure; refusals name the rule and cite the policy's
// FILE:LINE when the policy came from a file (SourceLines).
#pragma once

#include <string>

#include "schedd/core/types.h"

namespace mlsched::core {

/// A submission as the checks see it: who, and the account / partition / QoS the job names
/// ("" = the default; the partition must already be resolved and defined).
struct AssociationRequest {
  std::string user;
  bool privileged = false;  // root, schedd's own user or an operator: no access checks
  std::string account;
  std::string partition;
  std::string qos;
};

/// The outcome: on success `account` is the account to charge; otherwise `error` says which rule
/// refused the job. kDenied: the user may not do this (PERMISSION_DENIED); kInvalid: the request
/// names something the policy does not define (INVALID_ARGUMENT).
struct AssociationResult {
  enum class Code { kOk, kDenied, kInvalid };
  Code code = Code::kOk;
  std::string account;
  std::string error;
  bool ok() const { return code == Code::kOk; }
};

/// Whether `account` lists `user` among its users (its members).
bool AccountListsUser(const AccountPolicy& account, const std::string& user);

/// The account charged when a job names none: the user's [[users]] default_account, else the
/// first account (in policy order) that lists the user, else "default".
std::string DefaultAccount(const PolicySet& policy, const std::string& user);

/// The QoS list that restricts jobs of `account`: its own allow_qos, else the nearest ancestor's
/// non-empty one; null when nothing up the tree restricts QoS (or the account is not defined).
const AccountPolicy* QosListOwner(const PolicySet& policy, const std::string& account);

/// Checks `req` against `policy` and resolves the default account. Unprivileged callers:
/// the partition's allow_accounts and allow_qos always apply; with policy.enforce_associations the
/// account must be defined and list the user, and the QoS must be defined and allowed by the
/// account (or its nearest ancestor with allow_qos). Privileged callers are only refused an
/// undefined QoS under enforcement.
AssociationResult CheckAssociation(const PolicySet& policy, const AssociationRequest& req);

}  // namespace mlsched::core
