// The server-side leases one control connection of a Client handed out.
//
// A lease from a same-host server points into memory its connection's transport mapped: the
// server's shared pool, or its device pool opened over CUDA IPC. A reconnect (the server
// restarted, a request timed out) used to drop that transport at once, unmapping the memory
// under any lease still held; the next mapping could then land at the same address, and the
// lease silently read another entry's bytes (NetShm.ALeaseOutlivesAReconnectToARestartedServer).
// And a lease released after the reconnect sent its RELEASE on the new connection, where the
// same id can name one of the new connection's own leases.
//
// So the Client counts its leases per connection. At a reconnect, a connection with leases
// still out is retired: it keeps its transport (the memory its leases point into) and its
// control socket until the last of them is released, and their RELEASEs go out on that old
// socket, never the new one. The memory of a retired connection stays mapped that long.
// Where the server was restarted (or died), that memory is the old server's, which nothing
// writes any more: a held lease reads its entry as it was (its RELEASE just fails). Where
// the same server is still running (a reconnect after a timed-out request), the old socket
// still being open keeps the server's leases on it, so their entries stay in place
// (NetShm.ALeaseOutlivesAReconnectToTheSameRunningServer; before, the client closed it and
// the server reused the blocks). The socket is kept only where every request went out whole
// (the server reads it at a frame boundary); a send that failed partway closes it, and then
// a held lease keeps its mapping but not its bytes.
//
//   ReadLease lease(generation->Count(), token, data, info);   // counted until released
//   generation->Retire(std::move(transport), std::move(fd));   // the connection ended
//
// Thread rules: the Client's -- one thread at a time, leases released under the same rules.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "cache/cache.h"
#include "net/frame_stream.h"
#include "net/transport.h"

namespace ecstore::net {

class LeaseGeneration : public ReadLease::Releaser {
 public:
  // live: sends RELEASE of a lease id on the connection while it is current. dropped: called
  // when a retired generation's last lease goes; it destroys this generation.
  LeaseGeneration(ReadLease::Releaser* live, std::function<void(LeaseGeneration*)> dropped)
      : live_(live), dropped_(std::move(dropped)) {}
  LeaseGeneration(const LeaseGeneration&) = delete;
  LeaseGeneration& operator=(const LeaseGeneration&) = delete;

  // The releaser for one new lease, counted until its Release.
  ReadLease::Releaser* Count() {
    ++outstanding_;
    return this;
  }
  void Release(void* token) override;
  // The connection ended with leases out: keeps `transport` until the last is released, and
  // `control`, the old control socket where it is still in step (else invalid), to send
  // their RELEASEs on.
  void Retire(std::unique_ptr<Transport> transport, UniqueFd control);
  size_t outstanding() const { return outstanding_; }

 private:
  ReadLease::Releaser* const live_;
  const std::function<void(LeaseGeneration*)> dropped_;
  size_t outstanding_ = 0;
  bool retired_ = false;
  std::unique_ptr<Transport> transport_;  // a retired connection's, kept for its leases
  FrameStream control_;                   // ... and its control socket
};

}  // namespace ecstore::net
