// Who may use a server that has no token: the user it runs as (and root), and with group
// access the members of its group. Asked of the kernel for each connection -- the unix
// socket's peer credentials (SO_PEERCRED), a loopback TCP peer's socket owner from the
// kernel's socket table (sock_diag, /proc/net/tcp where that is not there) -- so another
// local user cannot read or erase entries through a loopback port.
//
//   if (token.empty()) EC_RETURN_IF_ERROR(LocalPeerMayConnect(fd, /*unix_socket=*/false, {}));
//
// Thread rules: functions, callable from any thread.
#pragma once

#include <sys/types.h>

#include "base/status.h"

namespace ecstore::net {

struct PeerRule {
  bool group_access = false;  // members of the server's group too
};

// Ok when the peer of the accepted socket `fd` may connect; InvalidArgument naming its uid
// and the remedy (a token) when it may not, or when its user cannot be told.
Status LocalPeerMayConnect(int fd, bool unix_socket, const PeerRule& rule);

// The user owning the other end of a loopback TCP connection `fd` (accepted or connected):
// from the kernel's socket table, or where that cannot be asked, /proc/net/tcp(6) (which
// the second reads alone).
Result<uid_t> LoopbackPeerUid(int fd);
Result<uid_t> LoopbackPeerUidFromProc(int fd);
// The user at the other end of a unix socket (SO_PEERCRED).
Result<uid_t> UnixPeerUid(int fd);

}  // namespace ecstore::net
