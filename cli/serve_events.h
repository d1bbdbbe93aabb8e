// serve's entry events (--events, docs/events.md): the publisher the store tells, and with
// CURVE (--events-key) the server's gate deciding who may subscribe.
//
//   Events events;
//   StartEvents(g, a, join, store.get(), &events);   // CliError: what to give instead
//   events.Serving(server.get());                    // ... Serving(nullptr) before it goes
//
// Thread rules: Serving from the owner; MaySubscribe from the publisher's thread.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/mutex.h"
#include "cli/cluster_commands.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "events/publisher.h"
#include "server/server.h"

namespace ecstore::cli {

// The entry events' publisher (--events), told by the store while it is set: taken off the
// store before the publisher goes. With CURVE, the server's gate says who may subscribe.
struct Events {
  Store* store = nullptr;
  Mutex mu;
  net::Server* server GUARDED_BY(mu) = nullptr;  // null: none may subscribe yet, or any more
  std::unique_ptr<events::EventPublisher> pub;
  void Serving(net::Server* s);
  bool MaySubscribe(const std::string& key);
  ~Events();
};

// Starts the publisher where --events is given. CliError where --events would be open to
// anyone a guarded daemon would refuse (TLS, an ACL, an address other hosts reach) without
// --events-key, or where a flag is wrong.
void StartEvents(const Globals& g, const ServeArgs& a, const std::optional<ClusterJoin>& join,
                 Store* store, Events* out);
// StartEvents's checks of the flags alone (no key file read): CliError where they would be
// refused.
void CheckEvents(const Globals& g, const ServeArgs& a);

// `events-keys PREFIX`: a CURVE key pair, the secret key in PREFIX.key (mode 0600: give it
// to serve --events-key) and the public key in PREFIX.pub (printed too: a subscriber's goes
// in the ACL as curve=, a node's to its subscribers).
int EventsKeysCommand(const std::string& prefix);

}  // namespace ecstore::cli
