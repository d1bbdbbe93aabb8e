// Tests that speak a server's same-host protocol raw (frames, no Client): the unix socket
// connected and HELLO answered.
#pragma once

#include <chrono>
#include <string>

#include "net/frame_stream.h"
#include "net/protocol.h"
#include "net/socket.h"

namespace ecstore::testing {

// Connects *s to the server's unix socket at `path` and says HELLO with `secret` (may be
// empty): *info from its HELLO_OK, and the pool's memfd passed with it, if any, into *pool_fd.
inline Status RawHello(const std::string& path, net::FrameStream* s, net::HelloInfo* info,
                       UniqueFd* pool_fd, const std::string& secret = "") {
  using namespace net;  // NOLINT: the protocol's names
  auto fd = ConnectUnix(path, std::chrono::milliseconds(2000));
  if (!fd.ok()) return fd.status();
  s->Adopt(std::move(fd).value());
  BodyWriter hello;
  hello.Str(secret);
  EC_RETURN_IF_ERROR(s->Send(Op::kHello, hello.data()));
  int passed = -1;
  auto hi = s->ReadReply(Op::kHelloOk, &passed);
  *pool_fd = UniqueFd(passed);
  if (!hi.ok()) return hi.status();
  BodyReader r(reinterpret_cast<const uint8_t*>(hi->data()), hi->size());
  if (!ParseHelloBody(&r, info)) return Status::Unavailable("malformed HELLO_OK");
  return Status::Ok();
}

}  // namespace ecstore::testing
