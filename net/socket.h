// Blocking socket helpers with per-call timeouts (SO_RCVTIMEO / SO_SNDTIMEO), so a dead
// peer becomes an Unavailable status instead of a hang.
// Thread rules: functions; a socket is used by one thread at a time.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <string>

#include "base/env.h"
#include "base/host_port.h"
#include "base/status.h"

namespace ecstore::net {

// "tcp://127.0.0.1:7070", "127.0.0.1:7070", "localhost:7070" or "[::1]:7070"; "tls://" as
// "tcp://" (IsTlsAddress says which).
Result<HostPort> ParseHostPort(std::string_view text);
inline bool IsTlsAddress(std::string_view text) { return text.rfind("tls://", 0) == 0; }
// True when every address `host` resolves to is loopback (127.0.0.0/8, ::1).
bool IsLoopback(const std::string& host);

// Binds the host's first address (IPv4 preferred); *loopback says whether that address is.
Result<UniqueFd> Listen(const HostPort& at, uint16_t* bound_port, bool* loopback = nullptr);
Result<UniqueFd> ConnectTcp(const HostPort& to, std::chrono::milliseconds timeout);
void SetTimeouts(int fd, std::chrono::milliseconds timeout);

// The socket file gets `mode` (owner only by default) before it listens.
Result<UniqueFd> ListenUnix(const std::string& path, mode_t mode = 0600);
Result<UniqueFd> ConnectUnix(const std::string& path, std::chrono::milliseconds timeout);
// Sends the iovecs with `pass_fd` attached (SCM_RIGHTS) to the first byte.
Status SendWithFd(int fd, iovec* iov, int iovcnt, int pass_fd, const char* what);
// Like RecvAll, and collects a descriptor passed with these bytes into *got_fd (or -1).
Status RecvAllWithFd(int fd, void* buf, size_t n, int* got_fd, const char* what);

// Unavailable on EOF, reset or timeout; `what` names the peer in the message. A deadline
// bounds the whole transfer (a peer trickling a byte at a time cannot stretch it); without
// one, each call is bounded by the socket's own timeouts.
using Deadline = std::chrono::steady_clock::time_point;
Status RecvAll(int fd, void* buf, size_t n, const char* what, Deadline deadline = Deadline::max());
// Reads and drops n bytes (a refused request's payload), so the connection stays in step.
Status DiscardBytes(int fd, uint64_t n, const char* what, Deadline deadline);
// Who is at the other end of an accepted socket, for logs: "IP:PORT", or "unix pid N".
std::string PeerName(int fd, const sockaddr_storage& sa);
Status SendAll(int fd, iovec* iov, int iovcnt, const char* what,
               Deadline deadline = Deadline::max());

}  // namespace ecstore::net
