#include "ops/http_endpoint.h"

#include <httplib.h>

#include "net/protocol.h"
#include "net/socket.h"
#include "ops/tls_front.h"

namespace ecstore::ops {
namespace {

// 200 "ok" (or "degraded: ..." where something the data path does not need is away), or
// 503 with the reason.
void Answer(httplib::Response& res, const Status& st, const std::string& degraded = "") {
  res.status = st.ok() ? 200 : 503;
  res.set_content(!st.ok()           ? st.ToString() + "\n"
                  : degraded.empty() ? "ok\n"
                                     : "degraded: " + degraded + "\n",
                  "text/plain");
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& listen,
                                                          HttpHandlers handlers,
                                                          const HttpSecurity& security) {
  auto hp = net::ParseHostPort(listen);
  if (!hp.ok())
    return Status::InvalidArgument("bad metrics address '" + listen +
                                   "': " + hp.status().message() + "; give HOST:PORT");
  const bool https = !security.cert.empty();
  if (!https && !net::IsLoopback(hp->host))
    return Status::InvalidArgument("the operator port on " + hp->host +
                                   " (not a loopback address) needs https: give --tls-cert and "
                                   "--tls-key, or listen on 127.0.0.1");
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->https_ = https;
  e->server_ = std::make_unique<httplib::Server>();
  auto& svr = *e->server_;
  // A scrape is answered in microseconds: the threads are for clients that are slow to send
  // or read, each bounded by the timeouts, so that a few of them cannot hold every thread
  // and stop /healthz (two slow connections once did, with two threads and the defaults).
  svr.new_task_queue = [] { return new httplib::ThreadPool(8); };
  svr.set_read_timeout(std::chrono::seconds(2));
  svr.set_write_timeout(std::chrono::seconds(2));
  svr.set_keep_alive_timeout(2);
  svr.set_keep_alive_max_count(16);
  svr.Get("/metrics", [h = handlers, token = security.metrics_token](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!token.empty() &&
        !net::SameToken(req.get_header_value("Authorization"), "Bearer " + token)) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("/metrics needs Authorization: Bearer <the --metrics-token-file secret>\n",
                      "text/plain");
      return;
    }
    res.set_content(h.metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/healthz", [h = handlers](const httplib::Request&, httplib::Response& res) {
    Answer(res, h.health(), h.degraded ? h.degraded() : "");
  });
  svr.Get("/readyz", [h = handlers](const httplib::Request&, httplib::Response& res) {
    Answer(res, h.ready());
  });
  // Over https, TLS ends in a front of its own (ops/tls_front.h) that hands plain bytes to the
  // HTTP server on loopback: handshakes never take the server's threads.
  const std::string bind_host = https ? "127.0.0.1" : hp->host;
  int port = hp->port == 0 || https ? svr.bind_to_any_port(bind_host)
                                    : (svr.bind_to_port(bind_host, hp->port) ? hp->port : -1);
  if (port <= 0)
    return Status::Unavailable("cannot listen for metrics on " + listen +
                               " (in use, or not an address of this host); choose another "
                               "--metrics-listen");
  e->port_ = static_cast<uint16_t>(port);
  if (https) {
    auto fd = net::Listen(*hp, &e->port_);
    if (!fd.ok())
      return Status::Unavailable("cannot listen for metrics on " + listen + ": " +
                                 fd.status().message() + "; choose another --metrics-listen");
    auto front = TlsFront::Start(std::move(fd).value(), static_cast<uint16_t>(port),
                                 {.cert = security.cert, .key = security.key});
    if (!front.ok())
      return Status::InvalidArgument("the operator port cannot use certificate " + security.cert +
                                     " and key " + security.key + ": " + front.status().message() +
                                     " (check --tls-cert, --tls-key)");
    e->front_ = std::move(front).value();
  }
  e->thread_ = std::thread([s = e->server_.get()] { s->listen_after_bind(); });
  return e;
}

HttpEndpoint::~HttpEndpoint() { Stop(); }

void HttpEndpoint::Stop() {
  if (!server_) return;
  if (front_) front_->Stop();
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace ecstore::ops
