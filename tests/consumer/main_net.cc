// Serves a store and reads it back over TCP, through the installed ecstore::net.
#include <ecstore/ecstore.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  ecstore::Options o;
  o.pool_bytes = 8 << 20;
  auto s = ecstore::Store::Open(argv[1], o);
  if (!s.ok()) return 1;
  ecstore::net::ServerOptions so;
  so.listen = "127.0.0.1:0";
  auto server = ecstore::net::Server::Start(s->get(), so);
  if (!server.ok()) return std::printf("serve: %s\n", server.status().ToString().c_str()), 1;
  ecstore::net::ClientOptions co;
  co.transport = ecstore::net::TransportKind::kTcp;
  auto c = ecstore::net::Client::Connect("127.0.0.1:" + std::to_string((*server)->port()), co);
  if (!c.ok()) return 1;
  std::vector<uint8_t> bytes(4096, 42), got(4096);
  if (!(*c)->Put("ns", "k", {ecstore::DType::kU8, {4096}}, bytes).ok()) return 1;
  if (!(*c)->Get("ns", "k", got).ok() || got != bytes) return 1;
  std::printf("consumer_net: put and get over TCP through the installed library\n");
  (*server)->Stop();
  return (*s)->Close().ok() ? 0 : 1;
}
