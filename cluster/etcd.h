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
// An etcd run as production etcds are (https, --client-cert-auth, `etcdctl auth enable`) is
// reached with "etcds://" and EtcdAccess: the CA it is verified against, this client's
// certificate and key, and an etcd user and password (a token is asked for once and again
// when etcd says it expired; with a client certificate and no user, etcd takes the
// certificate's CN as the user).
//
// Thread rules: one thread at a time per EtcdClient (each call opens its own connection to
// the first endpoint that answers).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"

namespace httplib {
class Client;
}

namespace ecstore::cluster {

struct EtcdAccess {
  std::string ca, cert, key;   // TLS (https): any of them, or an etcds:// address, turns it on
  std::string user, password;  // etcd auth
};

class EtcdClient {
 public:
  // "etcd://HOST:PORT[,HOST:PORT...]/NAME" (or "etcds://" over TLS): the endpoints, and the
  // cluster's name in *name.
  static Result<EtcdClient> Parse(const std::string& uri, std::string* name,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(2),
                                  EtcdAccess access = {});
  const std::vector<std::string>& endpoints() const { return endpoints_; }

  Result<int64_t> GrantLease(std::chrono::seconds ttl);
  // The TTL left after the renewal; NotFound when the lease has expired (it is gone: grant a
  // new one and put again).
  Result<int64_t> KeepAlive(int64_t lease);
  Status Revoke(int64_t lease);
  // The seconds a lease has left, and the TTL it was granted; NotFound once it has lapsed.
  Result<std::pair<int64_t, int64_t>> TimeToLive(int64_t lease);
  Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  Status Delete(const std::string& key);
  // One key: its value, the revision it last changed at and its lease (0: none); NotFound
  // where it is absent.
  struct Record {
    std::string value;
    int64_t mod_revision = 0;
    int64_t lease = 0;
  };
  Result<Record> Get(const std::string& key);
  // Puts only where the key last changed at `mod_revision` (0: only where it is absent), in
  // one etcd transaction: false, and nothing written, where it did not.
  Result<bool> PutIf(const std::string& key, int64_t mod_revision, const std::string& value,
                     int64_t lease);
  // Every key under `prefix` with its value, in key order.
  Result<std::vector<std::pair<std::string, std::string>>> Prefix(const std::string& prefix);
  // Prefix, and the store's revision it was read at (a watch from revision + 1 misses nothing).
  struct Range {
    int64_t revision = 0;
    std::vector<std::pair<std::string, std::string>> kvs;
    std::vector<int64_t> leases;  // kvs[i]'s lease (0: none)
  };
  Result<Range> PrefixAt(const std::string& prefix);
  // In one read: how many keys are under `prefix`, and how many
  // of them changed at or after `from_revision`. A view that followed the prefix up to
  // from_revision - 1 is current where `total` is its key count and `changed` is 0.
  struct Counts {
    int64_t total = 0, changed = 0;
    int64_t revision = 0;  // the store's revision the read saw
  };
  Result<Counts> CountSince(const std::string& prefix, int64_t from_revision);
  // The store's revision now, by the cheapest read etcd answers (one absent key). Nothing
  // anywhere in etcd changed since a revision it still equals.
  Result<int64_t> Revision(const std::string& key);
  // A copy that keeps its connection to etcd open between calls (HTTP keep-alive), for a
  // thread that asks etcd every second; a copy of it opens its own.
  EtcdClient KeepingConnection() const;
  EtcdClient(const EtcdClient& o);
  EtcdClient& operator=(const EtcdClient& o);
  EtcdClient(EtcdClient&&) noexcept;
  EtcdClient& operator=(EtcdClient&&) noexcept;
  ~EtcdClient();

  // One change under a watched prefix: a put of `value` at `key`, or its deletion (a lease
  // that lapsed or was revoked deletes the keys put under it).
  struct Event {
    bool deleted = false;
    std::string key, value;
    int64_t revision = 0;
    int64_t lease = 0;  // a put's lease (0: none)
  };
  // Ends a Watch at once from another thread (it returns Ok), and every Watch after it.
  class WatchCancel {
   public:
    void Cancel() EXCLUDES(mu_);
    // Ends the Watch in progress, or else the next one, with Unavailable (read the prefix
    // again); later ones run.
    void Interrupt() EXCLUDES(mu_);

   private:
    friend class EtcdClient;
    Mutex mu_;
    httplib::Client* active_ GUARDED_BY(mu_) = nullptr;
    bool cancelled_ GUARDED_BY(mu_) = false;
    bool interrupted_ GUARDED_BY(mu_) = false;
  };
  // Streams the changes under `prefix` from `from_revision` on (one etcd watch), telling
  // on_event of each, until `cancel` is cancelled (Ok), the stream is idle for `idle` (Ok:
  // watch again from the last revision told), or it
  // fails: Unavailable (etcd went away; the next Watch tries the next endpoint), or NotFound
  // when etcd compacted past from_revision (read the prefix again).
  Status Watch(const std::string& prefix, int64_t from_revision,
               const std::function<void(const Event&)>& on_event, WatchCancel* cancel,
               std::chrono::milliseconds idle);

 private:
  EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
             EtcdAccess access, bool tls);
  // POSTs `body` (JSON) to `path` at the first endpoint that answers; the reply's JSON text.
  // With a user, authenticated (again once where etcd says the token is no longer valid).
  Result<std::string> Call(const std::string& path, const std::string& body);
  Result<std::string> CallOnce(const std::string& path, const std::string& body, bool* auth_failed);
  // A client of endpoint `hp` (https with the CA and certificate where TLS is on), with
  // the auth token where there is one.
  std::unique_ptr<httplib::Client> Http(const std::string& hp);
  Status Authenticate();

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds timeout_;
  EtcdAccess access_;
  bool tls_ = false;
  std::string auth_token_;  // etcd's, while it lasts
  size_t watch_at_ = 0;     // the endpoint Watch uses
  bool keep_ = false;       // KeepingConnection's: calls reuse kept_ while it serves kept_at_
  std::unique_ptr<httplib::Client> kept_;
  std::string kept_at_;
};

// Base64 as etcd's JSON gateway writes keys and values.
std::string Base64(std::string_view bytes);
Result<std::string> FromBase64(std::string_view text);

}  // namespace ecstore::cluster
