// How the CLI reaches a daemon, a cluster and its etcd from the global options: the shared
// secret, TLS, and etcd's TLS and auth (docs/security.md).
// Thread rules: functions of the options; they read files and the environment.
#pragma once

#include <string>

#include "cli/entry_commands.h"
#include "cluster/etcd.h"
#include "net/connection.h"

namespace ecstore::cli {

// The shared secret: --token-file's first line, else EC_STORE_TOKEN, else none.
std::string ClientToken(const Globals& g);
// A client's options: the token, --timeout and, for a tls:// --server or with a --tls-ca,
// TLS (--tls-ca, --tls-cert, --tls-key, --tls-server-name).
net::ClientOptions ClientOptionsOf(const Globals& g);
// --etcd-ca, --etcd-cert, --etcd-key, --etcd-user and the password in --etcd-password-file.
cluster::EtcdAccess EtcdAccessOf(const Globals& g);

}  // namespace ecstore::cli
