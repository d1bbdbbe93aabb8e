// Client: gets entries from a running `ec-store serve` (or an in-process Server).
//   auto c = Client::Connect("tcp://10.0.0.5:7070", {.token = secret});
//   auto info = c.value()->Get("qwen", mm_hash, dst);
// A dead or unreachable server is an Unavailable status within options.timeout (per
// attempt), never a hang; transport failures are retried `retries` times with a reconnect.
// Thread rules: one thread at a time per Client; use one Client per thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/protocol.h"
#include "net/socket.h"
#include "rdma/verbs.h"
#include "store/store.h"

namespace ecstore::net {

struct ClientOptions {
  std::chrono::milliseconds timeout{5000};
  int retries = 1;
  std::string token;
  // "auto": a loopback server that offers shared memory is read through it; a remote one
  // that offers RDMA, from a host with an RDMA device, through verbs. "tcp", "shm" and
  // "rdma" force one ("rdma" fails with Unavailable where it cannot be set up).
  std::string transport = "auto";
  size_t rdma_bounce_bytes = 64ull << 20;  // registered once per connection
};

// Bytes of an entry read in place from the server's shared pool; valid until Release.
struct SharedView {
  std::span<const uint8_t> bytes;
  EntryInfo info;
  uint64_t lease_id = 0;
};

class Client {
 public:
  // uri: "tcp://host:port", "host:port", or "unix:/path/serve.sock" (shared memory).
  static Result<std::unique_ptr<Client>> Connect(const std::string& uri,
                                                 const ClientOptions& options = {});
  ~Client();
  const char* transport() const { return rdma_ ? "rdma" : shm_ ? "shm" : "tcp"; }

  // Shared memory only: the entry in place, pinned by a lease until Release (or until the
  // server's lease TTL passes, after which the bytes may change).
  Result<SharedView> AcquireShared(std::string_view ns, std::string_view key);
  Status Release(uint64_t lease_id);

  // Copies the entry into dst (at least its size); returns its metadata.
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst);
  // Pipelined: all requests are sent, then the replies read in order.
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts);
  Result<std::vector<std::optional<EntryInfo>>> Lookup(std::string_view ns,
                                                       const std::vector<std::string>& keys);
  Result<std::vector<bool>> Contains(std::string_view ns, const std::vector<std::string>& keys);
  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t> bytes);
  Status Erase(std::string_view ns, std::string_view key);
  // Every entry, fetched a page at a time (a snapshot per page: entries that change while
  // listing may be missed or seen twice).
  Result<std::vector<EntryInfo>> List();
  Result<std::string> StatsJson();  // StatsToJson's schema, plus "transport"
  Result<StoreStats> Stats();

 private:
  Client(HostPort hp, ClientOptions o) : hp_(std::move(hp)), opt_(std::move(o)) {}
  Status Reconnect();
  Status Hello(HelloInfo* info);
  Status ConnectRdma(const std::string& addr);
  std::vector<Result<EntryInfo>> GetManyRdma(std::string_view ns,
                                             const std::vector<std::string>& keys,
                                             const std::vector<std::span<uint8_t>>& dsts);
  void Unmap();
  Status SendRequest(Op op, const std::string& body, std::span<const uint8_t> payload = {});
  Status ReadHeader(FrameHeader* h);
  Result<std::string> ReadReply(Op expect);  // whole body of a small reply
  Status ReadGetReply(std::span<uint8_t> dst, EntryInfo* info);
  template <typename Fn>
  auto WithRetry(Fn fn) -> decltype(fn());

  HostPort hp_;
  ClientOptions opt_;
  UniqueFd fd_;
  uint64_t next_id_ = 1;
  bool shm_ = false;
  std::string unix_path_;
  const uint8_t* map_ = nullptr;  // the server's pool, read-only
  size_t map_bytes_ = 0;
  std::unique_ptr<RdmaConnection> rdma_;
};

}  // namespace ecstore::net
