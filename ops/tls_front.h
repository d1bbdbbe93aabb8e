// TlsFront: the operator port's TLS, terminated on one thread of its own. It accepts, runs
// each handshake step by step under a deadline (net::TlsSession::Begin and Step), and relays
// each established connection's bytes to the plain HTTP server behind it on loopback. A
// socket that stalls its handshake holds one of max_connections slots until its deadline,
// never a thread, so /healthz answers while such sockets wait (with a handshake on each of
// the HTTP server's threads, 32 of them took /healthz from milliseconds to eight seconds).
//
//   auto front = TlsFront::Start(std::move(listening_fd), backend_port, {.cert = c, .key = k});
//   ...
//   front->Stop();
//
// Thread rules: Start and Stop from the owner; the relay runs on the front's thread alone.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "net/socket.h"

namespace ecstore::ops {

struct TlsFrontOptions {
  std::string cert, key;  // PEM: the data port's pair
  std::chrono::milliseconds handshake_deadline{2000};
  std::chrono::milliseconds idle{10000};  // an established connection with nothing moving
  size_t max_connections = 256;           // past this, a new socket is closed at once
};

class TlsFront {
 public:
  // `listening`: a bound, listening TCP socket (the public address); bytes go to
  // 127.0.0.1:backend_port. InvalidArgument where the pair does not load.
  static Result<std::unique_ptr<TlsFront>> Start(UniqueFd listening, uint16_t backend_port,
                                                 TlsFrontOptions o);
  ~TlsFront();
  void Stop();  // idempotent: closes every connection

 private:
  class Relay;
  TlsFront() = default;
  std::unique_ptr<Relay> relay_;
  std::thread thread_;
};

}  // namespace ecstore::ops
