// The ways out of the process: remote (ec-store over TCP loopback and shared memory, against a
// plain socket stream and Redis), rdma (verbs against TCP over the same link) and device (the
// GPU tier against cudaMemcpy).
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bench/device.h"
#include "bench/remote.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "disk/aligned_buffer.h"
#include "net/client.h"
#include "rdma/verbs.h"
#include "server/server.h"

namespace ecstore::bench {
namespace {

// One value of each shape, as separate buffers (Payloads reuses one buffer per shape), the
// ones made for keys first_key.. first_key+3; `values` lists them `copies` times over.
struct OwnedValues {
  OwnedValues(Payloads& pl, uint64_t first_key, int copies) {
    for (int s = 0; s < 4; ++s) {
      auto v = pl.Get(s, first_key + static_cast<uint64_t>(s));
      owned.emplace_back(v.begin(), v.end());
    }
    for (int c = 0; c < copies; ++c)
      for (auto& v : owned) values.emplace_back(v.data(), v.size());
  }
  std::vector<std::vector<uint8_t>> owned;
  std::vector<std::span<const uint8_t>> values;
};

}  // namespace

void RemoteWorkload(const Config& cfg, Payloads& pl) {
  Progress("remote: ec-store over TCP loopback vs a socket stream vs Redis");
  OwnedValues v(pl, 1000, 2);
  RemoteResults r = RunRemote(v.values, cfg.quick ? 4 : 16, cfg.dir + "/remote");
  auto rec = [](const char* w, const char* sys, const Sample& s, std::string note) {
    return Record{w, sys, s.gbps, s.ops_per_s, s.p50_us, s.p99_us, -1, std::move(note)};
  };
  char runs[96];
  std::snprintf(runs, sizeof runs,
                "; the faster of runs before (%.2f) and after (%.2f GB/s) the gets",
                r.socket_stream_runs.first, r.socket_stream_runs.second);
  Add(rec("socket_stream", "limit", r.socket_stream,
          std::string("plain TCP loopback stream, same two processes") + runs));
  std::string vs_redis =
      r.redis ? "; " + std::to_string(r.ecstore_tcp.gbps / r.redis->gbps).substr(0, 4) + "x Redis"
              : "";
  Add(rec("remote_get", "ec-store", r.ecstore_tcp,
          "Client::Get over TCP loopback, 2.9-58 MB entries" + vs_redis));
  if (r.redis)
    Add(rec("remote_get", "redis", *r.redis, "redis-server 7 GET via hiredis"));
  else
    Add({"remote_get", "redis", 0, 0, 0, 0, -1, "not run: " + r.redis_note});
  std::snprintf(runs, sizeof runs, "; the faster of runs beside the two puts (%.2f, %.2f GB/s)",
                r.socket_upload_runs.first, r.socket_upload_runs.second);
  Add(rec("socket_upload", "limit", r.socket_upload,
          std::string("plain TCP loopback stream the other way: bytes in, one-byte ack") + runs));
  Add(rec("remote_put", "ec-store", r.ecstore_tcp_put,
          "Client::Put over TCP loopback of new keys, received straight into a pool block"));
  Add(rec("remote_put", "ec-store-same", r.ecstore_tcp_reput,
          "the same puts of the keys and bytes the server holds: checked equal, entry kept"));
  Add(rec("memcpy_values", "limit", r.memcpy_values,
          "memcpy of the same values (same sizes, same order) from pinned memory into the same "
          "destination, split over as many threads as a Client's copies out of the pool"));
  HoldToLimit("shm_get", "ec-store", "memcpy_values");
  Add(rec("shm_get", "ec-store", r.ecstore_shm,
          "same host: one GET_SHM_STREAM (the pool hit told at once, copied out of the mapped "
          "pool), the lease released (small unix-socket messages)"));
  Add(rec("small_rtt", "limit", r.unix_ping_pong,
          "39 bytes up and 98 down over a unix socket pair to another process, alternated "
          "block by block with the lookups"));
  char rtt[96];
  std::snprintf(
      rtt, sizeof rtt, "; %.2fx the limit's p50",
      r.unix_ping_pong.p50_us > 0 ? r.ecstore_shm_lookup.p50_us / r.unix_ping_pong.p50_us : 0.0);
  Add(rec("small_rtt", "ec-store", r.ecstore_shm_lookup,
          std::string("same host: Client::Lookup of a held key through the daemon (one request "
                      "of the same sizes over its unix socket)") +
              rtt));
  HoldToLimit("shm_put", "ec-store", "memcpy_values");
  HoldToLimit("shm_put", "ec-store-socket", "memcpy_values");
  Add(rec("shm_put", "ec-store", r.ecstore_shm_put,
          "same host, new keys: Client::Put through the put arena (a memcpy into it, the "
          "server's copy out of it into the pool block, then the checksum)"));
  Add(rec("shm_put", "ec-store-socket", r.ecstore_socket_put,
          "the same puts with ClientOptions::put_arena off, alternated: over the unix socket "
          "(a copy into the kernel, one out into the pool block, checksummed as it lands)"));
}

// The device tier against cudaMemcpy of the same sizes (GPU machine; a row says why not
// elsewhere). Ratios are computed in Report from the limits recorded here.
void DeviceWorkload(const Config& cfg, Payloads& pl) {
  Progress("device: the device tier vs cudaMemcpy");
  OwnedValues v(pl, 2000, 1);
  for (auto& r : RunDevice(v.values, cfg.quick ? 5 : 20, cfg.dir + "/device"))
    Add({r.workload, r.system, r.s.gbps, r.s.ops_per_s, r.s.p50_us, r.s.p99_us, -1, r.note});
  // Each ec-store row against its limit, in the note: same sizes, same run.
  const std::pair<const char*, const char*> vs[] = {
      {"device_get_d2d", "device_d2d"}, {"device_lease_d2d", "device_d2d"},
      {"device_get_h2d", "device_h2d"}, {"device_promote", "device_h2d"},
      {"device_demote", "device_d2h"},  {"device_ipc_get", "device_d2d"},
      {"device_get_d2h", "device_d2h"}};
  // Entry ready on the GPU, each tier against the file baseline's load_file(device="cuda").
  if (Record* warm = Find("ready_on_gpu", "baseline-warm"))
    for (auto [w, sys] : {std::pair{"device_get_d2d", "from the device tier"},
                          std::pair{"device_get_h2d", "from the host pool"},
                          std::pair{"ready_on_gpu", "from disk"}}) {
      Record* r = Find(w, std::string(w) == "ready_on_gpu" ? "ec-store-disk" : "ec-store");
      Record* cold = Find("ready_on_gpu", "baseline-cold");
      if (!r || !cold || r->p50_us <= 0) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "; ready on the GPU %s: p50 %.0f us, %.1fx / %.1fx lower "
                    "than load_file warm / cold",
                    sys, r->p50_us, warm->p50_us / r->p50_us, cold->p50_us / r->p50_us);
      r->note += buf;
    }
  for (auto [w, limit] : vs) {
    Record* r = Find(w, "ec-store");
    Record* l = Find(limit, "limit");
    if (!r || !l || l->gbps <= 0) continue;
    char buf[96];
    std::snprintf(buf, sizeof buf, "; %.2fx %s (p50 %.0f vs %.0f us)", r->gbps / l->gbps, limit,
                  r->p50_us, l->p50_us);
    r->note += buf;
  }
}

// Gets over RDMA verbs against TCP over the same link, in one process. On this project's
// machines that link is Soft-RoCE inside a QEMU TCG guest (`make bench-rdma`): the figures
// show the path works end to end, not what a NIC does.
void RdmaWorkload(const Config& cfg, Payloads& pl) {
  if (!rdma::RdmaDevicePresent()) {
    Add({"rdma_get", "ec-store", 0, 0, 0, 0, -1,
         "not run: no RDMA device here (make bench-rdma runs it under Soft-RoCE)"});
    return;
  }
  Progress("rdma: gets over verbs vs TCP on " + cfg.rdma_addr + " (emulated)");
  std::string sdir = cfg.dir + "/rdma";
  std::filesystem::remove_all(sdir);
  auto store = OpenStore(cfg, sdir, 256 * kMiB);
  uint64_t total = 0;
  std::vector<std::string> keys;
  for (int s = 0; s < 4; ++s) {
    keys.push_back("rd" + std::to_string(s));
    auto v = pl.Get(s, 2000 + s);
    Die(store->Put("bench", keys.back(), Payloads::Meta(s), v), "rdma put");
    total += v.size();
  }
  net::ServerOptions so;
  so.listen = cfg.rdma_addr + ":0";
  so.token = "bench";
  so.rdma_listen = cfg.rdma_addr + ":0";
  auto server = net::Server::Start(store.get(), so);
  Die(server.status(), "rdma server");
  AlignedBuffer dst(60 * kMiB);
  std::memset(dst.data(), 0, dst.size());
  // The same gets into the same buffer: over verbs through the connection's bounce buffer,
  // over verbs with the buffer registered (Cache::RegisterMemory: the NIC writes it), and
  // over TCP on the same link.
  struct Way {
    const char* transport;
    bool registered;
    const char* system;
  };
  for (const Way& w :
       {Way{"rdma", false, "ec-store-rdma-bounce"}, Way{"rdma", true, "ec-store-rdma-registered"},
        Way{"tcp", false, "ec-store-tcp"}}) {
    net::ClientOptions co;
    co.token = "bench";
    co.transport = *net::ParseTransportKind(w.transport);
    co.timeout = std::chrono::milliseconds(60000);
    auto c = net::Client::Connect(
        so.listen.substr(0, so.listen.rfind(':')) + ":" + std::to_string((*server)->port()), co);
    Die(c.status(), "rdma client");
    if (w.registered)
      Die((*c)->RegisterMemory(BufferDesc::Host({dst.data(), dst.size()})), "register dst");
    Latencies lat;
    const int rounds = 3;
    auto t0 = Clock::now();
    for (int r = 0; r < rounds; ++r)
      for (const std::string& k : keys) {
        auto t = Clock::now();
        Die((*c)->Get("bench", k, {dst.data(), dst.size()}).status(), "rdma get");
        lat.Add(t);
      }
    double secs = Since(t0);
    TransferStats ts = (*c)->transfer_stats();
    char how[160];
    std::snprintf(how, sizeof how, "; %llu reads direct, %llu through the bounce",
                  static_cast<unsigned long long>(ts.direct_reads),
                  static_cast<unsigned long long>(ts.bounced_reads));
    Add({"rdma_get", w.system, rounds * total / secs / 1e9, rounds * keys.size() / secs, lat.P(0.5),
         lat.P(0.99), -1,
         std::string("EMULATED: Soft-RoCE (rdma_rxe) in QEMU TCG, 2.9-58 MB entries; "
                     "correctness, not NIC speed") +
             (std::string(w.transport) == "rdma" ? how : "")});
  }
  (*server)->Stop();
  Die(store->Close(), "close");
  std::filesystem::remove_all(sdir);
}

}  // namespace ecstore::bench
