// The `tls` workload: gets and puts over TLS against the same over plain TCP (its limit: the
// same bytes, the same store, the same loopback, without encryption), alternated request by
// request so that drift hits both alike; the handshake (connect, TLS, HELLO) against a plain
// connect and HELLO; and the cost of an ACL check per request. The certificates are made
// with the openssl command in the bench's directory.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bench/results.h"
#include "bench/workloads.h"
#include "net/client.h"
#include "server/server.h"

namespace ecstore::bench {
namespace {

bool MakeCertificates(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/s.ext") << "subjectAltName=IP:127.0.0.1\n";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes ";
  const std::string cmds[] = {
      "openssl req -x509" + ec + "-days 2 -subj /CN=bench-ca -keyout " + dir + "/ca.key -out " +
          dir + "/ca.crt",
      "openssl req" + ec + "-subj /CN=bench -keyout " + dir + "/s.key -out " + dir + "/s.csr",
      "openssl x509 -req -in " + dir + "/s.csr -CA " + dir + "/ca.crt -CAkey " + dir +
          "/ca.key -CAcreateserial -days 2 -extfile " + dir + "/s.ext -out " + dir + "/s.crt"};
  for (const std::string& c : cmds)
    if (std::system((c + " >/dev/null 2>&1").c_str()) != 0) return false;
  return true;
}

struct Pair {
  TimedReads plain, tls;
};

// Each op of one size over both connections, alternated (which goes first alternates too).
void TimeBoth(net::Client& plain, net::Client& tls, int rounds,
              const std::function<Status(net::Client&, int round)>& op, uint64_t bytes, Pair* out) {
  for (int r = -1; r < rounds; ++r)
    for (int k = 0; k < 2; ++k) {
      const bool tls_first = (r + k) % 2 != 0;
      for (net::Client* c : tls_first ? std::array{&tls, &plain} : std::array{&plain, &tls}) {
        auto s = Clock::now();
        if (Status st = op(*c, r); !st.ok()) Die(st, "tls workload");
        if (r >= 0) (c == &tls ? out->tls : out->plain).Add(s, bytes);
      }
    }
}

void SizeRows(net::Client& plain, net::Client& tls, int shape, int rounds, Payloads& pl) {
  const uint64_t bytes = 2ull * kShapes[shape].rows * kShapes[shape].width;
  auto v = pl.Get(shape, 77);
  std::vector<uint8_t> value(v.begin(), v.end()), dst(bytes);
  const TensorMeta meta = Payloads::Meta(shape);
  char mb[16];
  std::snprintf(mb, sizeof mb, "%.1fMB", bytes / 1e6);
  Pair get, put;
  if (Status st = plain.Put("bench", "tls-get", meta, {value.data(), value.size()}); !st.ok())
    Die(st, "tls put");
  TimeBoth(
      plain, tls, rounds,
      [&](net::Client& c, int) {
        return c.Get("bench", "tls-get", {dst.data(), dst.size()}).status();
      },
      bytes, &get);
  // New keys each round, as an encoder saves new images (the pool evicts the oldest).
  int n = 0;
  TimeBoth(
      plain, tls, rounds,
      [&](net::Client& c, int) {
        return c.Put("bench", "tls-put-" + std::to_string(n++ % 8), meta,
                     {value.data(), value.size()});
      },
      bytes, &put);
  const std::string w = std::string("tls_get_") + mb, wp = std::string("tls_put_") + mb;
  get.plain.Report(w.c_str(), "limit", "plain TCP loopback get of the same entry, same store");
  get.tls.Report(w.c_str(), "ec-store-tls",
                 "Client::Get over TLS 1.3 (userspace OpenSSL where kTLS is off)");
  put.plain.Report(wp.c_str(), "limit", "plain TCP loopback put of the same bytes, same store");
  put.tls.Report(wp.c_str(), "ec-store-tls", "Client::Put over TLS 1.3");
  HoldToLimit(w, "ec-store-tls", w);
  HoldToLimit(wp, "ec-store-tls", wp);
}

// Connect and HELLO, over TLS and plainly, alternated.
void HandshakeRows(const std::string& tcp, const std::string& tls, const net::ClientOptions& o,
                   int n) {
  TimedReads plain, secure;
  net::ClientOptions plain_o = o;
  plain_o.tls.reset();
  for (int i = 0; i < n; ++i)
    for (bool t : {i % 2 == 0, i % 2 != 0}) {
      auto s = Clock::now();
      auto c = net::Client::Connect(t ? tls : tcp, t ? o : plain_o);
      if (!c.ok()) Die(c.status(), "tls handshake");
      (t ? secure : plain).Add(s, 0);
    }
  plain.Report("tls_handshake", "limit", "TCP connect and HELLO on loopback");
  secure.Report("tls_handshake", "ec-store-tls",
                "TCP connect, TLS 1.3 handshake (P-256) and HELLO");
}

// A good client's small gets alone and beside 32 sockets that opened a TLS handshake and
// stalled (one byte each), in alternating rounds: a handshake runs on the event loop, so the
// stalled ones hold no worker and the limit is the same client's gets with nothing beside.
void StalledHandshakeRows(net::Client& tls, uint16_t port, int rounds) {
  std::vector<uint8_t> value(4096, 7), dst(4096);
  const TensorMeta meta{DType::kU8, {4096}};
  if (Status st = tls.Put("bench", "tls-small", meta, {value.data(), value.size()}); !st.ok())
    Die(st, "tls put");
  TimedReads alone, beside;
  auto gets = [&](TimedReads* into) {
    for (int i = 0; i < 200; ++i) {
      auto s = Clock::now();
      if (Status st = tls.Get("bench", "tls-small", {dst.data(), dst.size()}).status(); !st.ok())
        Die(st, "tls get");
      into->Add(s, dst.size());
    }
  };
  for (int r = 0; r < 2 * rounds; ++r) {  // which comes first alternates: no order's warmth
    if (r % 2 == 0) gets(&alone);
    std::vector<UniqueFd> stalled;
    for (int i = 0; i < 32; ++i) {
      auto fd = net::ConnectTcp({"127.0.0.1", port}, std::chrono::milliseconds(2000));
      if (!fd.ok()) Die(fd.status(), "a stalled handshake");
      const uint8_t first = 0x16;  // a TLS record begins, and nothing follows
      if (send(fd->get(), &first, 1, MSG_NOSIGNAL) != 1) Die(Status::IOError("send"), "stall");
      stalled.push_back(std::move(fd).value());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gets(&beside);
    stalled.clear();
    if (r % 2 == 1) gets(&alone);
  }
  alone.Report("tls_get_4k_stalled", "limit", "the same client's 4 KiB TLS gets, nothing beside");
  beside.Report("tls_get_4k_stalled", "ec-store-tls",
                "4 KiB TLS gets beside 32 sockets that sent one byte of a handshake and stalled");
  HoldToLimit("tls_get_4k_stalled", "ec-store-tls", "tls_get_4k_stalled");
}

// Gate::Check of a GET under a principal among 100, each with two globs.
void AclRow(const std::string& dir) {
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += "p" + std::to_string(i) + " cert=p" + std::to_string(i) + " ns=model-" +
            std::to_string(i) + "*,shared-" + std::to_string(i) + " rights=read\n";
  const std::string path = dir + "/acl";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  auto gate = net::Gate::Make({.token = "",
                               .group_access = false,
                               .tls = std::nullopt,
                               .acl_file = path,
                               .metrics = nullptr});
  if (!gate.ok()) Die(gate.status(), "acl");
  auto acl = net::Acl::Load(path);
  net::Identity who{.name = "p99",
                    .proof = {},
                    .own = nullptr,
                    .acl = *acl,
                    .principal = (*acl)->ByName("p99"),
                    .generation = 1};
  net::BodyWriter w;
  w.Str("model-99-qwen");
  w.Str(std::string(64, 'a'));
  const std::string body = w.data();
  const int n = 200000;
  auto s = Clock::now();
  for (int i = 0; i < n; ++i)
    if (!(*gate)->Check(&who, net::Op::kGet, body).ok()) Die(Status::IOError("refused"), "acl");
  const double secs = Since(s);
  Add({"acl_check", "ec-store", 0, n / secs, secs / n * 1e6, 0, -1,
       "Gate::Check of a GET: the principal's grants (1 of 100 principals, 2 globs each) "
       "against the namespace; p50 column is the mean"});
}

}  // namespace

void TlsWorkload(const Config& cfg, Payloads& pl) {
  Progress("tls: gets and puts over TLS vs plain TCP, handshakes, the ACL check");
  const std::string dir = cfg.dir + "/tls";
  if (!MakeCertificates(dir + "/pki")) {
    Add({"tls_get", "ec-store-tls", 0, 0, 0, 0, -1, "not run: the openssl command failed"});
    return;
  }
  Options o;
  o.pool_bytes = 1ull << 30;
  auto store = Store::Open(dir + "/store", o);
  if (!store.ok()) Die(store.status(), "tls store");
  net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto plain_server = net::Server::Start(store->get(), so);
  so.tls = net::TlsOptions{.cert = dir + "/pki/s.crt",
                           .key = dir + "/pki/s.key",
                           .ca = "",
                           .client_auth = net::ClientAuth::kNo,
                           .server_name = "",
                           .server_uri = ""};
  auto tls_server = net::Server::Start(store->get(), so);
  if (!plain_server.ok() || !tls_server.ok()) Die(tls_server.status(), "tls servers");
  net::ClientOptions co;
  co.transport = net::TransportKind::kTcp;
  const std::string tcp = "tcp://127.0.0.1:" + std::to_string((*plain_server)->port());
  const std::string tls = "tls://127.0.0.1:" + std::to_string((*tls_server)->port());
  net::ClientOptions to = co;
  to.tls = net::TlsOptions{.cert = "",
                           .key = "",
                           .ca = dir + "/pki/ca.crt",
                           .client_auth = net::ClientAuth::kNo,
                           .server_name = "",
                           .server_uri = ""};
  auto pc = net::Client::Connect(tcp, co);
  auto tc = net::Client::Connect(tls, to);
  if (!pc.ok() || !tc.ok()) Die(tc.status(), "tls clients");
  const int rounds = cfg.quick ? 3 : 10;
  for (int shape : {0, 1, 3}) SizeRows(**pc, **tc, shape, rounds, pl);
  HandshakeRows(tcp, tls, to, cfg.quick ? 20 : 100);
  StalledHandshakeRows(**tc, (*tls_server)->port(), cfg.quick ? 3 : 10);
  AclRow(dir);
  pc->reset();
  tc->reset();
  (*tls_server)->Stop();
  (*plain_server)->Stop();
  (void)(*store)->Close();
}

}  // namespace ecstore::bench
