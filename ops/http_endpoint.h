// HttpEndpoint: the daemon's operator port (--metrics-listen): GET /metrics (Prometheus
// text), /healthz (liveness: 200 while the store can serve and persist -- "ok", or
// "degraded: ..." -- 503 with the reason when it cannot) and /readyz (200 once the store is
// recovered and the server accepts clients; 503 while starting or stopping). Served by cpp-httplib
// on threads of its own, apart from the data path; over https, TLS ends in a TlsFront
// (ops/tls_front.h) on one more thread, so that handshakes never take httplib's threads. Thread
// rules: Start/Stop from the owner; the handlers run on the endpoint's threads and must be
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"

namespace httplib {
class Server;
}

namespace ecstore::ops {

class TlsFront;

struct HttpHandlers {
  std::function<std::string()> metrics;
  std::function<Status()> health;
  std::function<Status()> ready;
  // Optional: what is away without stopping the data path (e.g. "etcd unreachable"), said
  // in /healthz's 200 answer as "degraded: ..."; empty when nothing is.
  std::function<std::string()> degraded;
};

// Who may read the operator port: over https with the data port's certificate and key, and
// /metrics only with `Authorization: Bearer <metrics_token>` where one is set (/healthz and
// /readyz stay open: probes carry no secret). Plain http only on a loopback address.
struct HttpSecurity {
  std::string cert, key;
  std::string metrics_token;
};

class HttpEndpoint {
 public:
  // listen: "HOST:PORT" (port 0: any free port). InvalidArgument for plain http on an
  // address that is not loopback.
  static Result<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                     HttpHandlers handlers,
                                                     const HttpSecurity& security = {});
  bool https() const { return https_; }
  ~HttpEndpoint();
  uint16_t port() const { return port_; }
  void Stop();  // idempotent

 private:
  HttpEndpoint() = default;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<TlsFront> front_;  // https: the TLS ends here
  std::thread thread_;
  uint16_t port_ = 0;
  bool https_ = false;
};

}  // namespace ecstore::ops
