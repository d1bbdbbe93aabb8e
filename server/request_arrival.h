// RequestArrival: whether a connection's next request has arrived whole enough to be read
// without waiting on its client, so that a worker never sits on a client that trickles its
// bytes (slow-loris). Until it has, the socket's SO_RCVLOWAT is raised to the bytes still
// wanted, so epoll wakes the connection once they are here, not at every segment.
//
//   RequestArrival arrival(RequestArrival::kFrames);
//   if (!arrival.Arrived(fd)) /* arm EPOLLIN and give the worker back */;
//
// What "whole enough" is: a frame's header and its body up to 64 KiB (a PUT: the key and
// tensor meta before its payload, which streams into the pool); over TLS, one whole record.
// A unix socket's readiness ignores SO_RCVLOWAT: its requests are read once their first byte
// has come (its clients are same-host users the server admitted), as are those of a kTLS
// receive side, whose records the socket decrypts.
// Thread rules: one thread at a time (the worker serving its connection).
#pragma once

#include <chrono>
#include <cstddef>

namespace ecstore::net {

// The most of a PUT's body read before its payload: ns, key and tensor meta
// (2+128 + 2+256 + 4+1+8*8+8 bytes at most).
inline constexpr size_t kPutPrefixMax = 512;

class RequestArrival {
 public:
  enum Framing { kFrames, kTlsRecords, kUnchecked };
  explicit RequestArrival(Framing framing) : framing_(framing) {}
  void set_framing(Framing framing) { framing_ = framing; }
  // True when the request may be read now, or the client hung up or failed (the read then
  // says so). False: not yet (SO_RCVLOWAT is raised to what is missing). Before HELLO only a
  // header is waited for: anything but HELLO is refused on it alone.
  bool Arrived(int fd, bool greeted = true);
  // Since when part of a frame has been waiting for the rest (epoch: none is): the ticker
  // holds it to io_timeout, as a worker holds a frame it reads.
  std::chrono::steady_clock::time_point partial_since() const { return partial_since_; }

 private:
  bool Want(int fd, size_t want, size_t have);
  Framing framing_;
  int lowat_ = 1;
  std::chrono::steady_clock::time_point partial_since_{};
};

}  // namespace ecstore::net
