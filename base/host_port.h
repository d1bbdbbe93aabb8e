// HostPort: a network endpoint as the user wrote it ("10.0.0.5", 7070). Parsed and resolved
// by net/socket.h; used by every transport (TCP, shared memory's selection, RDMA verbs).
// Thread rules: a value type.
#pragma once

#include <cstdint>
#include <string>

namespace ecstore::net {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

}  // namespace ecstore::net
