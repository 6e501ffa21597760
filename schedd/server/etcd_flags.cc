#include "schedd/server/etcd_flags.h"

#include <CLI/CLI.hpp>

namespace mlsched::server {

void AddEtcdFlags(CLI::App& app, EtcdFlags* f) {
  app.add_option("--etcd-tls-ca", f->security.tls.ca, "HA: CA of the etcd members' certificates (PEM; etcd's own CA, "
                 "not the cluster CA); with it etcd is reached over TLS");
  app.add_option("--etcd-tls-cert", f->security.tls.cert, "HA: etcd client certificate (PEM; etcd --client-cert-auth)");
  app.add_option("--etcd-tls-key", f->security.tls.key, "HA: the key of --etcd-tls-cert (PEM)");
  app.add_option("--etcd-user", f->security.user, "HA: etcd RBAC user to log in as (needs --etcd-password-file)");
  app.add_option("--etcd-password-file", f->security.password_file, "HA: file holding --etcd-user's password (first line)");
  app.add_flag("--ha-insecure", f->insecure, "HA: allow plaintext etcd (anyone who reaches etcd reads every job's "
               "environment and can run code as any user: a throwaway test cluster only)");
}

std::string CheckEtcdFlags(const EtcdFlags& f) {
  const EtcdSecurity& s = f.security;
  if (!s.tls_enabled() && !f.insecure)
    return "HA needs TLS to etcd (--etcd-tls-ca, --etcd-tls-cert, --etcd-tls-key; scripts/mlsched-certs.sh makes them): "
           "whoever can read etcd reads every job's environment, and whoever can write it runs code as any user. "
           "--ha-insecure allows plaintext for a throwaway test cluster only (docs/operations.md, Securing etcd)";
  if (s.tls_enabled() && s.tls.cert.empty() && s.user.empty())
    return "--etcd-tls-ca without a client certificate (--etcd-tls-cert/--etcd-tls-key) or an RBAC login "
           "(--etcd-user): etcd could not tell this client from anyone else";
  if (s.tls.cert.empty() != s.tls.key.empty()) return "--etcd-tls-cert and --etcd-tls-key go together";
  if (!s.user.empty() && s.password_file.empty()) return "--etcd-user needs --etcd-password-file";
  return "";
}

}  // namespace mlsched::server
