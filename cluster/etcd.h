// EtcdClient: the few etcd v3 calls a cluster needs -- leases (grant, keep alive, revoke),
// put under a lease, read a prefix, delete -- through etcd's own JSON gateway (HTTP/1.1,
// /v3/...), so the store needs no gRPC stack. Membership, its consistency and its leases
// are etcd's; this only speaks to it.
//
//   auto etcd = EtcdClient::Parse("etcd://10.0.0.2:2379,10.0.0.3:2379/prod");  // endpoints
//   auto lease = etcd->GrantLease(std::chrono::seconds(10));
//   etcd->Put("/ec-store/prod/nodes/a", value, *lease);
//   etcd->KeepAlive(*lease);                  // well within the TTL, again and again
//
// Thread rules: one thread at a time per EtcdClient (each call opens its own connection to
// the first endpoint that answers).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ecstore::cluster {

class EtcdClient {
 public:
  // "etcd://HOST:PORT[,HOST:PORT...]/NAME": the endpoints, and the cluster's name in *name.
  static Result<EtcdClient> Parse(const std::string& uri, std::string* name,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(2));
  const std::vector<std::string>& endpoints() const { return endpoints_; }

  Result<int64_t> GrantLease(std::chrono::seconds ttl);
  // The TTL left after the renewal; NotFound when the lease has expired (it is gone: grant a
  // new one and put again).
  Result<int64_t> KeepAlive(int64_t lease);
  Status Revoke(int64_t lease);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  // Every key under `prefix` with its value, in key order.
  Result<std::vector<std::pair<std::string, std::string>>> Prefix(const std::string& prefix);

 private:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {}
  // POSTs `body` (JSON) to `path` at the first endpoint that answers; the reply's JSON text.
  Result<std::string> Call(const std::string& path, const std::string& body);

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
};

// Base64 as etcd's JSON gateway writes keys and values.
std::string Base64(std::string_view bytes);
Result<std::string> FromBase64(std::string_view text);

}  // namespace ecstore::cluster
