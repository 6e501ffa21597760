// The etcd connection flags schedd and mlreport share (--etcd-tls-ca, --etcd-tls-cert,
// --etcd-tls-key, --etcd-user, --etcd-password-file, --ha-insecure) and the rule that HA mode never
// reaches etcd in plaintext unless told to (docs/operations.md, "Securing etcd").
#pragma once

#include <string>

#include "schedd/server/etcd_client.h"

namespace CLI {
class App;
}

namespace mlsched::server {

/// What the flags set.
struct EtcdFlags {
  EtcdSecurity security;
  bool insecure = false;  // --ha-insecure: plaintext etcd allowed
};

/// Adds the etcd flags to `app`, writing into `flags` when parsed.
void AddEtcdFlags(CLI::App& app, EtcdFlags* flags);

/// "" when `flags` may be used to reach etcd; else the error for the user (no TLS and no
/// --ha-insecure; a CA without a client certificate or RBAC login; a user without a password file).
std::string CheckEtcdFlags(const EtcdFlags& flags);

}  // namespace mlsched::server
