// TLS on the data port and per-namespace access, end to end over loopback: certificates made
// here with the openssl command, a server and clients in this process.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "net/client.h"
#include "server/server.h"

namespace ecstore::net {
namespace {

using testing::Payload;
using testing::Span;
using testing::TempDir;

TlsOptions Files(std::string cert, std::string key, std::string ca = "") {
  TlsOptions o;
  o.cert = std::move(cert);
  o.key = std::move(key);
  o.ca = std::move(ca);
  return o;
}

// A CA and certificates it signs, made with openssl in a scratch directory.
class Pki {
 public:
  explicit Pki(const std::string& dir, const std::string& ca_name = "test-ca") : dir_(dir) {
    Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=" +
        ca_name + " -keyout " + Path("ca.key") + " -out " + Path("ca.crt"));
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::string ca() const { return Path("ca.crt"); }
  // name.crt and name.key, for CN `cn` with DNS/IP SANs `sans` ("DNS:localhost,IP:127.0.0.1"),
  // valid for `days` (0: expires at once).
  void Issue(const std::string& name, const std::string& cn, const std::string& sans = "",
             int days = 2) {
    Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + cn +
        " -keyout " + Path(name + ".key") + " -out " + Path(name + ".csr"));
    std::ofstream(Path(name + ".ext")) << (sans.empty() ? "" : "subjectAltName=" + sans + "\n");
    Run("openssl x509 -req -in " + Path(name + ".csr") + " -CA " + ca() + " -CAkey " +
        Path("ca.key") + " -CAcreateserial -days " + std::to_string(days) + " -extfile " +
        Path(name + ".ext") + " -out " + Path(name + ".crt"));
  }
  TlsOptions Server(const std::string& name) const {
    return Files(Path(name + ".crt"), Path(name + ".key"), ca());
  }
  TlsOptions Client(const std::string& name = "") const {
    TlsOptions o;
    o.ca = ca();
    if (!name.empty()) o.cert = Path(name + ".crt"), o.key = Path(name + ".key");
    return o;
  }

 private:
  static void Run(const std::string& cmd) {
    ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  }
  std::string dir_;
};

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pki_ = std::make_unique<Pki>(dir_.sub(""));
    pki_->Issue("server", "node-1", "DNS:localhost,DNS:node-1,IP:127.0.0.1");
    pki_->Issue("encoder", "encoder");
    pki_->Issue("prefill", "prefill");
    pki_->Issue("ops", "ops");
    Options o;
    o.pool_bytes = 64 * kMiB;
    auto store = Store::Open(dir_.sub("store"), o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  void Serve(ServerOptions so) {
    so.listen = "127.0.0.1:0";
    auto s = Server::Start(store_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  std::string Addr() const { return "tls://127.0.0.1:" + std::to_string(server_->port()); }
  Result<std::unique_ptr<Client>> Connect(TlsOptions tls, std::string token = "") {
    ClientOptions co;
    co.tls = std::move(tls);
    co.token = std::move(token);
    co.retries = 0;
    co.timeout = std::chrono::milliseconds(3000);
    return Client::Connect(Addr(), co);
  }
  std::string WriteAcl(const std::string& text) {
    std::ofstream(dir_.sub("acl")) << text;
    return dir_.sub("acl");
  }

  TempDir dir_;
  std::unique_ptr<Pki> pki_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Server> server_;
};

TEST_F(TlsTest, GetsAndPutsAreByteExactWithAndWithoutClientCertificates) {
  for (ClientAuth auth : {ClientAuth::kRequired, ClientAuth::kNo}) {
    ServerOptions so;
    so.tls = pki_->Server("server");
    so.tls->client_auth = auth;
    Serve(so);
    auto c = Connect(auth == ClientAuth::kNo ? pki_->Client() : pki_->Client("encoder"));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (size_t bytes : {size_t{1}, size_t{3000}, size_t{5 << 20} + 7}) {
      auto data = Payload(bytes, bytes);
      const std::string key = "k" + std::to_string(bytes);
      ASSERT_TRUE((*c)->Put("ns", key, testing::U8(bytes), Span(data)).ok());
      std::vector<uint8_t> out(bytes);
      auto got = (*c)->Get("ns", key, {out.data(), out.size()});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(out, data);
    }
    server_->Stop();
  }
}

// A cluster member is proven by its member URI alone: a certificate naming the address and
// host dialled, or the node id as a DNS name, proves nothing.
TEST_F(TlsTest, AServerUriIsProvenByThatUriAloneNeverByAnAddress) {
  pki_->Issue("member", "node-1", "URI:ecstore://c1/node/node-1,DNS:localhost,IP:127.0.0.1");
  for (const char* name : {"server", "member"}) {
    ServerOptions so;
    so.tls = pki_->Server(name);
    Serve(so);
    for (const char* uri : {"ecstore://c1/node/node-1", "ecstore://c1/node/node-2",
                            "ecstore://c2/node/node-1", "ecstore://c1/node/node-"}) {
      TlsOptions o = pki_->Client("encoder");
      o.server_name = "127.0.0.1,node-1";  // ignored where a URI is asked for
      o.server_uri = uri;
      auto c = Connect(o);
      const bool proven =
          std::string(name) == "member" && std::string(uri) == "ecstore://c1/node/node-1";
      ASSERT_EQ(c.ok(), proven) << name << " " << uri << " " << c.status().ToString();
      if (!proven) {
        EXPECT_NE(c.status().message().find(uri), std::string::npos);
      }
    }
    auto file =
        CertificateCarriesUri(pki_->Path(std::string(name) + ".crt"), "ecstore://c1/node/node-1");
    ASSERT_TRUE(file.ok());
    EXPECT_EQ(*file, std::string(name) == "member");
    server_->Stop();
  }
  EXPECT_FALSE(CertificateCarriesUri(pki_->Path("absent.crt"), "ecstore://c1/node/node-1").ok());
}

TEST_F(TlsTest, EachRefusedClientIsToldWhyAndTheStoreIsUnchanged) {
  ServerOptions so;
  so.tls = pki_->Server("server");
  Serve(so);
  {
    auto c = Connect(pki_->Client("encoder"));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto v = Payload(1, 100);
    ASSERT_TRUE((*c)->Put("ns", "kept", testing::U8(100), Span(v)).ok());
  }
  // Plain TCP on the TLS port.
  ClientOptions plain;
  plain.retries = 0;
  auto p = Client::Connect("tcp://127.0.0.1:" + std::to_string(server_->port()), plain);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("requires TLS"), std::string::npos) << p.status().ToString();
  // A client trusting another CA.
  std::filesystem::create_directories(dir_.sub("other"));
  Pki other_ca(dir_.sub("other"), "other-ca");
  auto o = Connect(Files("", "", other_ca.ca()));
  ASSERT_FALSE(o.ok());
  EXPECT_TRUE(o.status().IsPermissionDenied()) << o.status().ToString();
  EXPECT_NE(o.status().message().find("certificate"), std::string::npos);
  // A wrong server name.
  TlsOptions wrong = pki_->Client("encoder");
  wrong.server_name = "node-2";
  auto w = Connect(wrong);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("mismatch"), std::string::npos) << w.status().ToString();
  // No client certificate where one is required.
  auto n = Connect(pki_->Client());
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(n.status().IsPermissionDenied()) << n.status().ToString();
  EXPECT_NE(n.status().message().find("requires a client certificate"), std::string::npos);
  // An expired server certificate.
  pki_->Issue("expired", "node-1", "DNS:localhost,IP:127.0.0.1", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  server_->Stop();
  so.tls = pki_->Server("expired");
  Serve(so);
  auto e = Connect(pki_->Client("encoder"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("expired"), std::string::npos) << e.status().ToString();
  // Nothing the refused clients did changed the store.
  auto listing = store_->List();
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 1u);
  EXPECT_EQ((*listing)[0].key, "kept");
}

// Sockets that begin a TLS handshake and stall (one byte of a ClientHello) take no worker:
// handshakes run on the event loop. With a blocking handshake on a worker, 32 of them left a
// good client one GET in 6 s and no new connection. Its p99 is printed beside the bound.
TEST_F(TlsTest, StalledHandshakesHoldNoWorker) {
  ServerOptions so;
  so.tls = pki_->Server("server");
  so.workers = 4;
  so.hello_timeout = std::chrono::seconds(20);
  Serve(so);
  auto c = Connect(pki_->Client("encoder"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto v = Payload(5, 4096);
  ASSERT_TRUE((*c)->Put("ns", "k", testing::U8(v.size()), Span(v)).ok());
  auto p99 = [&] {
    std::vector<double> ms;
    std::vector<uint8_t> out(v.size());
    for (int i = 0; i < 200; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE((*c)->Get("ns", "k", {out.data(), out.size()}).ok());
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() * 99 / 100];
  };
  const double before = p99();
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 32; ++i) {
    auto fd = ConnectTcp({"127.0.0.1", server_->port()}, std::chrono::milliseconds(2000));
    ASSERT_TRUE(fd.ok());
    const uint8_t first = 0x16;  // a TLS record's first byte, and then nothing
    ASSERT_EQ(send(fd->get(), &first, 1, MSG_NOSIGNAL), 1);
    stalled.push_back(std::move(fd).value());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server has them all
  const double after = p99();
  std::printf("good client's GET p99: %.3f ms alone, %.3f ms beside 32 stalled handshakes\n",
              before, after);
  EXPECT_LT(after, std::max(2 * before, 50.0));
  for (int i = 0; i < 4; ++i) {  // new connections are accepted and served at once
    const auto t0 = std::chrono::steady_clock::now();
    auto n = Connect(pki_->Client("encoder"));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE((*n)->Lookup("ns", "k").ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  }
}

TEST_F(TlsTest, AMismatchedPairIsRefusedAtStartAndAtReloadTheOldPairStays) {
  ServerOptions so;
  so.tls = Files(pki_->Path("server.crt"), pki_->Path("encoder.key"));
  auto bad = Server::Start(store_.get(), so);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not match"), std::string::npos);
  std::filesystem::copy_file(pki_->Path("server.crt"), dir_.sub("live.crt"));
  std::filesystem::copy_file(pki_->Path("server.key"), dir_.sub("live.key"));
  so.tls = Files(dir_.sub("live.crt"), dir_.sub("live.key"), pki_->ca());
  Serve(so);
  std::filesystem::copy_file(pki_->Path("encoder.key"), dir_.sub("live.key"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(server_->gate().ReloadTls().ok());
  auto c = Connect(pki_->Client("encoder"));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
}

// Certificates replaced and reloaded while clients put and get: no request fails, and new
// connections see the new certificate.
TEST_F(TlsTest, RotationUnderLoadFailsNoRequest) {
  std::filesystem::copy_file(pki_->Path("server.crt"), dir_.sub("live.crt"));
  std::filesystem::copy_file(pki_->Path("server.key"), dir_.sub("live.key"));
  ServerOptions so;
  so.tls = Files(dir_.sub("live.crt"), dir_.sub("live.key"), pki_->ca());
  Serve(so);
  pki_->Issue("next", "node-1-next", "DNS:localhost,IP:127.0.0.1");
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      auto data = Payload(t, 64 << 10);
      std::vector<uint8_t> out(data.size());
      while (!stop) {  // a new connection each round, then a put and a get on it
        auto c = Connect(pki_->Client("encoder"));
        if (!c.ok()) {
          ++failed;
          continue;
        }
        const std::string key = "t" + std::to_string(t);
        if (!(*c)->Put("ns", key, testing::U8(data.size()), Span(data)).ok()) ++failed;
        auto got = (*c)->Get("ns", key, {out.data(), out.size()});
        if (!got.ok() || out != data) ++failed;
        ++done;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::filesystem::copy_file(pki_->Path("next.crt"), dir_.sub("live.crt"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki_->Path("next.key"), dir_.sub("live.key"),
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_TRUE(server_->gate().ReloadTls().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(done.load(), 6);
  EXPECT_EQ(server_->gate().tls_context()->subject(), "node-1-next");
}

// A rotation needs no signal: the acceptor notices the files changed. STATS says what TLS
// this connection has.
TEST_F(TlsTest, ChangedCertificateFilesAreReloadedWithoutASignal) {
  std::filesystem::copy_file(pki_->Path("server.crt"), dir_.sub("live.crt"));
  std::filesystem::copy_file(pki_->Path("server.key"), dir_.sub("live.key"));
  ServerOptions so;
  so.tls = Files(dir_.sub("live.crt"), dir_.sub("live.key"), pki_->ca());
  Serve(so);
  auto c = Connect(pki_->Client("encoder"));
  ASSERT_TRUE(c.ok());
  auto stats = (*c)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  pki_->Issue("next", "node-1-next", "DNS:localhost,IP:127.0.0.1");
  std::filesystem::copy_file(pki_->Path("next.crt"), dir_.sub("live.crt"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(pki_->Path("next.key"), dir_.sub("live.key"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_TRUE(
      testing::WaitFor([&] { return server_->gate().tls_context()->subject() == "node-1-next"; },
                       std::chrono::milliseconds(5000)));
  EXPECT_TRUE(Connect(pki_->Client("encoder")).ok());
  EXPECT_TRUE((*c)->Lookup("ns", "none").status().IsNotFound());  // the open one keeps its session
  EXPECT_NE(server_->gate().TlsJson(nullptr).find("\"sessions\":2"), std::string::npos)
      << server_->gate().TlsJson(nullptr);
}

class AclTest : public TlsTest {
 protected:
  void ServeWithAcl() {
    ServerOptions so;
    so.tls = pki_->Server("server");
    so.tls->client_auth = ClientAuth::kOptional;  // bob proves himself by his secret
    so.acl_file = WriteAcl(
        "# encoder writes model a; prefill reads it; ops reads the stats\n"
        "encoder cert=encoder ns=a.* rights=write\n"
        "encoder ns=a.* rights=read\n"
        "prefill cert=prefill ns=a.* rights=read\n"
        "ops     cert=ops     ns=*   rights=admin\n"
        "bob     secret=" +
        SecretHash("bob-secret") + " ns=b.* rights=all\n");
    Serve(so);
  }
};

TEST_F(AclTest, EachPrincipalDoesWhatItIsGrantedAndNothingElse) {
  ServeWithAcl();
  auto enc = Connect(pki_->Client("encoder"));
  auto pre = Connect(pki_->Client("prefill"));
  auto ops = Connect(pki_->Client("ops"));
  auto bob = Connect(pki_->Client(), "bob-secret");
  ASSERT_TRUE(enc.ok() && pre.ok() && ops.ok() && bob.ok())
      << enc.status().ToString() << pre.status().ToString() << bob.status().ToString();
  auto v = Payload(7, 1000);
  Status first = (*enc)->Put("a.model", "x", testing::U8(1000), Span(v));
  ASSERT_TRUE(first.ok()) << first.ToString();
  ASSERT_TRUE((*bob)->Put("b.model", "y", testing::U8(1000), Span(v)).ok());
  std::vector<uint8_t> out(1000);
  EXPECT_TRUE((*pre)->Get("a.model", "x", {out.data(), out.size()}).ok());
  // The read-only principal cannot put or erase; the refusal names the right.
  Status put = (*pre)->Put("a.model", "z", testing::U8(1000), Span(v));
  EXPECT_TRUE(put.IsPermissionDenied()) << put.ToString();
  EXPECT_NE(put.message().find("may not write namespace 'a.model'"), std::string::npos);
  EXPECT_TRUE((*pre)->Erase("a.model", "x").IsPermissionDenied());
  // a.* cannot read, list or stat b.
  EXPECT_TRUE((*enc)->Get("b.model", "y", {out.data(), out.size()}).status().IsPermissionDenied());
  EXPECT_TRUE((*enc)->Lookup("b.model", "y").status().IsPermissionDenied());
  EXPECT_TRUE((*enc)->Stats().status().IsPermissionDenied());
  auto bob_list = (*bob)->List();
  ASSERT_TRUE(bob_list.ok());
  ASSERT_EQ(bob_list->size(), 1u);
  EXPECT_EQ((*bob_list)[0].ns, "b.model");
  // The operator sees stats, and cannot read entries.
  EXPECT_TRUE((*ops)->Stats().ok());
  EXPECT_TRUE((*ops)->Get("a.model", "x", {out.data(), out.size()}).status().IsPermissionDenied());
  // The connections stay usable after refusals.
  EXPECT_TRUE((*pre)->Get("a.model", "x", {out.data(), out.size()}).ok());
  // A client certificate the ACL does not name proves no principal.
  pki_->Issue("stranger", "stranger");
  auto s = Connect(pki_->Client("stranger"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsPermissionDenied()) << s.status().ToString();
}

TEST_F(AclTest, AnEditAppliesToTheNextRequest) {
  ServeWithAcl();
  auto pre = Connect(pki_->Client("prefill"));
  ASSERT_TRUE(pre.ok());
  EXPECT_TRUE((*pre)->Lookup("c.model", "x").status().IsPermissionDenied());
  WriteAcl("prefill cert=prefill ns=a.*,c.* rights=read\n");
  ASSERT_TRUE(server_->gate().ReloadAcl().ok());
  EXPECT_TRUE((*pre)->Lookup("c.model", "x").status().IsNotFound());
  WriteAcl("prefill cert=prefill ns=a.* rights=bogus\n");
  Status bad = server_->gate().ReloadAcl();
  EXPECT_NE(bad.message().find(":1: right 'bogus' is unknown"), std::string::npos)
      << bad.ToString();
  EXPECT_TRUE((*pre)->Lookup("c.model", "x").status().IsNotFound());  // the old one stays
}

// A connection is mapped again from the proof it presented, never from its principal's name:
// moving the name to another certificate takes the old certificate's connection away (refused
// at its next request, then closed), even when the name is given every right.
TEST_F(AclTest, AnEditRevokesByProofNotByName) {
  ServeWithAcl();
  pki_->Issue("prefill2", "prefill2");
  auto old_cert = Connect(pki_->Client("prefill"));
  ASSERT_TRUE(old_cert.ok());
  std::vector<uint8_t> out(1000);
  EXPECT_TRUE((*old_cert)->Lookup("a.model", "x").status().IsNotFound());
  WriteAcl("prefill cert=prefill2 ns=* rights=all\n");
  ASSERT_TRUE(server_->gate().ReloadAcl().ok());
  Status st = (*old_cert)->Lookup("a.model", "x").status();
  EXPECT_TRUE(st.IsPermissionDenied()) << st.ToString();
  EXPECT_NE(st.message().find("proves no principal"), std::string::npos) << st.ToString();
  EXPECT_FALSE((*old_cert)->Get("b.model", "y", {out.data(), out.size()}).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return server_->connections() == 0; },
                               std::chrono::seconds(5)));  // closed, not left open
  auto new_cert = Connect(pki_->Client("prefill2"));
  ASSERT_TRUE(new_cert.ok()) << new_cert.status().ToString();
  EXPECT_TRUE((*new_cert)->Lookup("b.model", "y").status().IsNotFound());
  EXPECT_FALSE(Connect(pki_->Client("prefill")).ok());
}

// The token is a proof too: rotated, every connection that used the old one is refused at
// its next request; one proven otherwise keeps its principal.
TEST_F(AclTest, ATokenRotationRevokesConnectionsThatUsedTheOldOne) {
  ServerOptions so;
  so.tls = pki_->Server("server");
  so.tls->client_auth = ClientAuth::kOptional;
  so.token = "old-token";
  so.acl_file = WriteAcl("encoder cert=encoder ns=a.* rights=read,write\n");
  Serve(so);
  auto by_token = Connect(pki_->Client(), "old-token");
  auto by_cert = Connect(pki_->Client("encoder"));
  ASSERT_TRUE(by_token.ok() && by_cert.ok());
  EXPECT_TRUE((*by_token)->Lookup("z", "x").status().IsNotFound());
  server_->SetToken("new-token");
  Status st = (*by_token)->Lookup("z", "x").status();
  EXPECT_TRUE(st.IsPermissionDenied()) << st.ToString();
  EXPECT_TRUE((*by_cert)->Lookup("a.m", "x").status().IsNotFound());
  EXPECT_FALSE(Connect(pki_->Client(), "old-token").ok());
  auto fresh = Connect(pki_->Client(), "new-token");
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE((*fresh)->Lookup("z", "x").status().IsNotFound());
}

// The ACL file is watched as the TLS pair is: one replaced by `mv` applies without a signal.
TEST_F(AclTest, AnAclReplacedByMvAppliesWithoutASignal) {
  ServeWithAcl();
  auto pre = Connect(pki_->Client("prefill"));
  ASSERT_TRUE(pre.ok());
  EXPECT_TRUE((*pre)->Lookup("c.model", "x").status().IsPermissionDenied());
  const std::string next = dir_.sub("acl.next");
  std::ofstream(next) << "prefill cert=prefill ns=a.*,c.* rights=read\n";
  ASSERT_EQ(std::rename(next.c_str(), dir_.sub("acl").c_str()), 0);
  EXPECT_TRUE(testing::WaitFor([&] { return (*pre)->Lookup("c.model", "x").status().IsNotFound(); },
                               std::chrono::seconds(5)));
}

// Random requests under random principals: none succeeds outside its grants, and no refused
// request changes the store.
TEST_F(AclTest, FuzzedRequestsNeverSucceedOutsideTheirGrants) {
  ServeWithAcl();
  struct Who {
    const char* cert;
    const char* token;
    std::function<bool(char op, const std::string& ns)> may;
  };
  auto in_a = [](const std::string& ns) { return ns.rfind("a.", 0) == 0; };
  auto in_b = [](const std::string& ns) { return ns.rfind("b.", 0) == 0; };
  std::vector<Who> who = {
      {"encoder", "", [&](char op, const std::string& ns) { return op != 's' && in_a(ns); }},
      {"prefill", "",
       [&](char op, const std::string& ns) {
         return op != 'p' && op != 'e' && op != 's' && in_a(ns);
       }},
      {"ops", "", [&](char op, const std::string&) { return op == 's'; }},
      {"", "bob-secret", [&](char op, const std::string& ns) { return op != 's' && in_b(ns); }},
  };
  std::vector<std::unique_ptr<Client>> clients;
  for (const Who& w : who) {
    auto c = Connect(pki_->Client(w.cert), w.token);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    clients.push_back(std::move(c).value());
  }
  std::mt19937 rng(42);
  const char* spaces[] = {"a.m", "b.m", "c.m", "a", "ab.m"};
  int outside = 0, refused_changed = 0, allowed = 0;
  auto v = Payload(3, 512);
  for (int i = 0; i < 600; ++i) {
    const size_t w = rng() % who.size();
    const std::string ns = spaces[rng() % 5], key = "k" + std::to_string(rng() % 4);
    const char op = "pgles"[rng() % 5];  // put, get, lookup, erase, stats
    auto before = store_->List()->size();
    std::vector<uint8_t> out(512);
    Status st = op == 'p'   ? clients[w]->Put(ns, key, testing::U8(512), Span(v))
                : op == 'g' ? clients[w]->Get(ns, key, {out.data(), out.size()}).status()
                : op == 'l' ? clients[w]->Lookup(ns, key).status()
                : op == 'e' ? clients[w]->Erase(ns, key)
                            : clients[w]->Stats().status();
    const bool may = who[w].may(op, ns);
    if (may == st.IsPermissionDenied()) {
      ++outside;
      ADD_FAILURE() << w << " " << op << " " << ns << ": " << st.ToString();
    }
    if (st.IsPermissionDenied() && store_->List()->size() != before) ++refused_changed;
    if (may) ++allowed;
  }
  EXPECT_EQ(outside, 0);
  EXPECT_EQ(refused_changed, 0);
  EXPECT_GT(allowed, 60);
}

// A client that sends a token to a server that asks for none (EC_STORE_TOKEN set for
// another daemon) is served as a local user, as before principals existed.
TEST_F(TlsTest, ASecretSentToAServerThatAsksForNoneIsIgnored) {
  Serve(ServerOptions{});
  ClientOptions co;
  co.token = "for-another-daemon";
  co.retries = 0;
  auto c = Client::Connect("tcp://127.0.0.1:" + std::to_string(server_->port()), co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Lookup("ns", "absent").status().IsNotFound());
}

TEST(Acl, ParsesGrantsAndSaysWhereAFileIsWrong) {
  auto acl = Acl::Parse("x cert=x ns=m.*,n rights=read,write # comment\nx uid=5\n", "t");
  ASSERT_TRUE(acl.ok()) << acl.status().ToString();
  const Principal* x = acl->get()->ByCert("x", {});
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(acl->get()->ByUid(5), x);
  EXPECT_TRUE(x->Allows(kWrite, "m.deep.er"));
  EXPECT_TRUE(x->Allows(kRead, "n"));
  EXPECT_FALSE(x->Allows(kRead, "nn"));
  EXPECT_FALSE(x->Allows(kAdmin, "m.a"));
  EXPECT_EQ(x->Grants(), "read on m.*; write on m.*; read on n; write on n");
  for (auto [text, says] : std::vector<std::pair<const char*, const char*>>{
           {"x ns=a rights=read\n", "has no proof"},
           {"x cert=a ns=a\n", "go together"},
           {"\nx secret=abc ns=a rights=read\n", "t:2: secret= takes sha256:"},
           {"x cert=a ns=a rights=rw\n", "right 'rw' is unknown"},
           {"x cert=a nope=1\n", "'nope' is unknown"}}) {
    auto bad = Acl::Parse(text, "t");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(says), std::string::npos) << bad.status().ToString();
  }
  EXPECT_EQ(SecretHash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace ecstore::net
