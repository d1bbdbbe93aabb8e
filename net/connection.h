// Connection: a Client's link to its server -- the control connection (FrameStream), the data
// path chosen for it (a Transport: shared memory, RDMA or TCP), and the server-side leases
// handed out over it (net/lease_generation.h). The Client asks; this connects, says HELLO,
// picks the transport by capability, and on a reconnect retires the old link's leases with
// the memory they point into.
//
//   Connection link(hp, /*unix_path=*/"", options);
//   EC_RETURN_IF_ERROR(link.Open());                   // HELLO, then the data path
//   EC_RETURN_IF_ERROR(link.SendRequest(Op::kStats, {}));
//   auto body = link.ReadReply(Op::kStatsOk);
//   link.Abandon();  // out of step (a reply timed out): the next Open starts afresh
//
// Thread rules: owned by one Client and used under its rules (one thread at a time); leases
// from it are released under the same rules.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/cache.h"
#include "net/frame_stream.h"
#include "net/lease_generation.h"
#include "net/socket.h"
#include "net/transport.h"
#include "net/transport_choice.h"

namespace ecstore::net {

struct ClientOptions {
  std::chrono::milliseconds timeout{5000};  // each call's bound on the connection
  // The bound on establishing a TCP connection (0: `timeout`). A host that is down answers
  // nothing: a short one keeps a caller from waiting a whole call's timeout on a dead peer.
  std::chrono::milliseconds connect_timeout{0};
  int retries = 1;
  std::string token;
  // kAuto: chosen by capability (ChooseTransport) -- a loopback server that offers shared
  // memory is read in place through it; a remote one that offers RDMA, from a host with an
  // RDMA device, by one-sided reads; else TCP. The others force one (kRdma fails with
  // Unavailable where it cannot be set up).
  TransportKind transport = TransportKind::kAuto;
  size_t rdma_bounce_bytes = 64ull << 20;  // registered once per connection
  // Same host: puts through the connection's put arena (net/put_arena.h), a shared memfd of
  // at least 64 MiB and twice the largest put, asked for at the first put; false: puts
  // cross the unix socket, and ReservePut is refused.
  bool put_arena = true;
  // TLS to a TCP server (a tls:// address sets it): the CA trusted (empty: the system's),
  // a client certificate and key for a server that asks for one, and the name its
  // certificate must carry (empty: the host connected to). Never used over a unix socket,
  // and a loopback server is not left for its unix socket.
  std::optional<TlsOptions> tls;
};

class Connection : public Channel, private ReadLease::Releaser {
 public:
  // A TCP server at hp, or with a unix_path, the same-host server's unix socket.
  Connection(HostPort hp, std::string unix_path, ClientOptions options)
      : hp_(std::move(hp)),
        opt_(std::move(options)),
        unix_(!unix_path.empty()),
        unix_path_(std::move(unix_path)) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() override;

  // Ends the current link, if any (its leases' generation retired while any is held), and
  // opens a new one: connect, HELLO, the data path by capability. A loopback TCP address of
  // a server offering shared memory moves to its unix socket.
  Status Open();
  // Whether requests may go out: opened, and not abandoned since.
  bool valid() const { return conn_.valid(); }
  // The link is out of step or broken (a reply timed out, the server hung up): no more
  // requests on it; the next Open starts a new one. Where every request went out whole, its
  // socket stays open until then, and on past it while leases from it are held.
  void Abandon();
  int fd() const { return conn_.fd(); }
  // The open link's TLS session (null in the clear).
  const TlsSession* tls() const { return conn_.tls(); }
  const ClientOptions& options() const { return opt_; }
  // The data path of the open link (null before the first Open succeeds).
  Transport* transport() const { return transport_.get(); }
  const rdma::ReadCounters& rdma_reads() const { return *rdma_reads_; }
  // The kFeature* bits the open link's server offered in its HELLO_OK.
  uint32_t server_features() const { return features_; }

  // Kept across reconnects: memory gets land in (RDMA), and the registrar put arenas are
  // registered with.
  Status RegisterMemory(const BufferDesc& memory);
  void UnregisterMemory(const BufferDesc& memory);
  // The open link's transport reads into `memory` itself (one-sided reads) and it lies in
  // memory registered with it.
  bool WritesDirectly(const BufferDesc& memory) const;
  // `p` lies in device memory registered with RegisterMemory.
  bool InRegisteredDevice(std::span<const uint8_t> p) const;
  Status SetArenaRegistrar(std::shared_ptr<MemoryRegistrar> registrar);
  // The view of a cluster's members the next requests route by (VIEW): sent now where it
  // changed, and again at every (re)connection, so the server always holds the latest.
  Status SetView(int64_t revision);

  // Channel: the control connection, as transports use it.
  Status SendRequest(Op op, const std::string& body,
                     std::span<const uint8_t> payload = {}) override;
  Result<std::string> ReadReply(Op expect, int* passed_fd = nullptr) override;
  Result<std::string> ReadReplyOrNote(Op expect, Op note, bool* is_note) override;
  bool InputWaiting() override;
  Status ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                      EntryInfo* info) override;
  // Each new lease's releaser: counted in this link's generation.
  ReadLease::Releaser* lease_releaser() override { return leases_->Count(); }

 private:
  Status Hello(HelloInfo* info, int* pool_fd);
  Status ChooseTransport(const HelloInfo& info, int pool_fd);
  Status StartTls(int fd);
  // Ends the control connection; its transport goes too, unless leases from it are still
  // held: then its generation is retired with it until they are released.
  void End();
  void Release(void* token) override;  // a lease of the open link: RELEASE its id

  HostPort hp_;
  const ClientOptions opt_;
  bool unix_ = false;           // the control connection is the unix socket (same host)
  bool switch_to_shm_ = false;  // ChooseTransport: a loopback server offering shared memory
  std::string unix_path_;
  int64_t view_ = 0;  // SetView's (0: none declared)
  FrameStream conn_;  // the control connection
  UniqueFd parked_;   // an abandoned one's socket, until the next Open retires or closes it
  std::unique_ptr<Transport> transport_;                   // set by each Open
  uint32_t features_ = 0;                                  // and these
  std::unique_ptr<LeaseGeneration> leases_;                // the open link's leases
  std::vector<std::unique_ptr<LeaseGeneration>> retired_;  // earlier ones with leases out
  std::vector<BufferDesc> registered_;  // RegisterMemory's, registered again on reconnect
  // Every RDMA transport's reads, across reconnects.
  std::shared_ptr<rdma::ReadCounters> rdma_reads_ = std::make_shared<rdma::ReadCounters>();
  std::shared_ptr<MemoryRegistrar> arena_registrar_;  // SetArenaRegistrar's
  std::shared_ptr<TlsContext> tls_ctx_;               // made at the first TLS Open
};

// Whether `st` is an older server's answer to a request it does not know ("unknown
// opcode"); if so the link is abandoned (that server hangs up after it), so the caller can
// go the older way on a fresh one.
bool AbandonIfUnknownOp(Connection* link, const Status& st);

}  // namespace ecstore::net
