#include "net/client.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cstring>

#include "store/stats_json.h"

namespace ecstore::net {

Result<std::unique_ptr<Client>> Client::Connect(const std::string& uri,
                                                const ClientOptions& options) {
  if (options.transport != "auto" && options.transport != "tcp" && options.transport != "shm" &&
      options.transport != "rdma")
    return Status::InvalidArgument("transport must be auto, tcp, shm or rdma");
  std::unique_ptr<Client> c;
  if (uri.rfind("unix:", 0) == 0) {
    c.reset(new Client({}, options));
    c->shm_ = true;
    c->unix_path_ = uri.substr(5);
  } else {
    if (options.transport == "shm")
      return Status::InvalidArgument("transport shm needs a unix:/path/serve.sock address");
    auto hp = ParseHostPort(uri);
    if (!hp.ok()) return hp.status();
    c.reset(new Client(*hp, options));
  }
  EC_RETURN_IF_ERROR(c->Reconnect());
  return c;
}

Client::~Client() { Unmap(); }

void Client::Unmap() {
  if (map_) munmap(const_cast<uint8_t*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

// HELLO; over the unix socket the reply carries the pool's memfd, which is mapped once.
Status Client::Hello(HelloInfo* info) {
  BodyWriter w;
  w.Str(opt_.token);
  EC_RETURN_IF_ERROR(SendRequest(Op::kHello, w.data()));
  uint8_t hdr[kHeaderBytes];
  int passed = -1;
  EC_RETURN_IF_ERROR(shm_ ? RecvAllWithFd(fd_.get(), hdr, kHeaderBytes, &passed, "server")
                          : RecvAll(fd_.get(), hdr, kHeaderBytes, "server"));
  UniqueFd pool_fd(passed);
  auto h = DecodeHeader(hdr);
  if (!h.ok()) return Status::Unavailable("server sent a malformed frame: " + h.status().message());
  std::string body(h->body_len, '\0');
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), body.data(), body.size(), "server"));
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  if (h->op == Op::kError) return ParseErrorBody(&r);
  if (h->op != Op::kHelloOk || !ParseHelloBody(&r, info))
    return Status::Unavailable("server answered HELLO with an unexpected frame");
  if (shm_) {
    if (!pool_fd.valid() || info->pool_bytes == 0)
      return Status::Unavailable("server did not pass its shared pool");
    Unmap();  // a restarted server has a new pool
    void* p = mmap(nullptr, info->pool_bytes, PROT_READ, MAP_SHARED, pool_fd.get(), 0);
    if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap the server's pool");
    map_ = static_cast<const uint8_t*>(p);
    map_bytes_ = info->pool_bytes;
  }
  return Status::Ok();
}

Status Client::Reconnect() {
  fd_.reset();
  if (shm_) {
    auto fd = ConnectUnix(unix_path_, opt_.timeout);
    if (!fd.ok()) return fd.status();
    fd_ = std::move(fd).value();
  } else {
    auto fd = ConnectTcp(hp_, opt_.timeout);
    if (!fd.ok()) return fd.status();
    fd_ = std::move(fd).value();
  }
  HelloInfo info;
  Status st = Hello(&info);
  if (!st.ok()) {
    fd_.reset();
    return st;
  }
  rdma_.reset();
  if (!shm_ && (opt_.transport == "rdma" || (opt_.transport == "auto" && !IsLoopback(hp_.host) &&
                                             !info.rdma_addr.empty() && RdmaDevicePresent()))) {
    if (info.rdma_addr.empty()) {
      fd_.reset();
      return Status::Unavailable("server offers no RDMA (it has no ServerOptions::rdma_listen)");
    }
    Status rst = ConnectRdma(info.rdma_addr);
    if (!rst.ok() && opt_.transport == "rdma") {
      fd_.reset();
      return rst;
    }
    if (!rst.ok()) spdlog::warn("RDMA unavailable ({}); using TCP", rst.ToString());
    return Status::Ok();
  }
  // Same host (loopback) and the server offers shared memory: switch to it.
  if (!shm_ && opt_.transport == "auto" && IsLoopback(hp_.host) && !info.shm_path.empty()) {
    UniqueFd tcp = std::move(fd_);
    shm_ = true;
    unix_path_ = info.shm_path;
    if (Reconnect().ok()) return Status::Ok();
    shm_ = false;  // not reachable from here after all: stay on TCP
    fd_ = std::move(tcp);
  }
  return Status::Ok();
}

Status Client::SendRequest(Op op, const std::string& body, std::span<const uint8_t> payload) {
  if (!fd_.valid()) return Status::Unavailable("not connected");
  uint8_t hdr[kHeaderBytes];
  EncodeHeader({kVersion, op, next_id_++, body.size() + payload.size()}, hdr);
  iovec iov[3] = {{hdr, kHeaderBytes},
                  {const_cast<char*>(body.data()), body.size()},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  return SendAll(fd_.get(), iov, payload.empty() ? 2 : 3, "server");
}

Status Client::ReadHeader(FrameHeader* h) {
  uint8_t hdr[kHeaderBytes];
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), hdr, kHeaderBytes, "server"));
  auto d = DecodeHeader(hdr);
  if (!d.ok()) return Status::Unavailable("server sent a malformed frame: " + d.status().message());
  *h = *d;
  return Status::Ok();
}

// Error frames carry the server's Status; anything else unexpected is Unavailable.
Result<std::string> Client::ReadReply(Op expect) {
  FrameHeader h;
  EC_RETURN_IF_ERROR(ReadHeader(&h));
  std::string body(h.body_len, '\0');
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), body.data(), body.size(), "server"));
  if (h.op == Op::kError) {
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return ParseErrorBody(&r);
  }
  if (h.op != expect) return Status::Unavailable("server answered with an unexpected frame");
  return body;
}

Status Client::ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                            EntryInfo* info) {
  FrameHeader h;
  EC_RETURN_IF_ERROR(ReadHeader(&h));
  if (h.op == Op::kError) {
    std::string body(h.body_len, '\0');
    EC_RETURN_IF_ERROR(RecvAll(fd_.get(), body.data(), body.size(), "server"));
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return ParseErrorBody(&r);
  }
  if (h.op != Op::kGetOk) return Status::Unavailable("server answered with an unexpected frame");
  uint32_t info_len = 0;
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), &info_len, 4, "server"));
  if (info_len > kMaxMetaBody || 4 + info_len > h.body_len)
    return Status::Unavailable("server sent a malformed GET reply");
  std::string ib(info_len, '\0');
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), ib.data(), ib.size(), "server"));
  BodyReader r(reinterpret_cast<const uint8_t*>(ib.data()), ib.size());
  if (!ReadInfo(&r, info) || info->bytes != h.body_len - 4 - info_len)
    return Status::Unavailable("server sent a malformed GET reply");
  std::span<uint8_t> dst = dst_for(*info);
  if (dst.size() >= info->bytes)  // straight into the caller's buffer
    return RecvAll(fd_.get(), dst.data(), info->bytes, "server");
  std::string drain(info->bytes, '\0');  // keep the stream in step, then refuse
  EC_RETURN_IF_ERROR(RecvAll(fd_.get(), drain.data(), drain.size(), "server"));
  return Status::InvalidArgument("destination buffer holds " + std::to_string(dst.size()) +
                                 " bytes but the entry has " + std::to_string(info->bytes));
}

// Runs fn; on a transport failure (Unavailable) reconnects and tries again, boundedly.
template <typename Fn>
auto Client::WithRetry(Fn fn) -> decltype(fn()) {
  for (int attempt = 0;; ++attempt) {
    if (!fd_.valid()) {
      Status st = Reconnect();
      if (!st.ok()) {
        if (attempt >= opt_.retries) return st;
        continue;
      }
    }
    auto result = fn();
    if (result.ok() || !result.status().IsUnavailable() || attempt >= opt_.retries) {
      if (!result.ok() && result.status().IsUnavailable()) fd_.reset();
      return result;
    }
    fd_.reset();
  }
}

namespace {
std::string KeyBody(std::string_view ns, std::string_view key) {
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  return w.data();
}
}  // namespace

Result<EntryInfo> Client::Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  if (rdma_ || opt_.transport == "rdma") {
    std::string k(key);
    for (int attempt = 0;; ++attempt) {
      if (!fd_.valid() || !rdma_) {
        Status st = Reconnect();  // sets the verbs connection up again
        if (!st.ok()) {
          if (attempt >= opt_.retries) return st;
          continue;
        }
        if (!rdma_) break;  // "auto" fell back to TCP
      }
      auto r = GetManyRdma(ns, {k}, {dst});
      if (r[0].ok() || !r[0].status().IsUnavailable() || attempt >= opt_.retries)
        return std::move(r[0]);
    }
  }
  if (shm_) {
    auto lease = AcquireShared(ns, key);
    if (!lease.ok()) return lease.status();
    if (dst.size() < lease->size())
      return Status::InvalidArgument("destination buffer holds " + std::to_string(dst.size()) +
                                     " bytes but the entry has " + std::to_string(lease->size()));
    std::memcpy(dst.data(), lease->data(), lease->size());
    return lease->info();
  }
  return WithRetry([&]() -> Result<EntryInfo> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kGet, KeyBody(ns, key)));
    EntryInfo info;
    EC_RETURN_IF_ERROR(ReadGetReply(dst, &info));
    info.ns = ns;
    info.key = key;
    return info;
  });
}

Status Client::ConnectRdma(const std::string& addr) {
  auto hp = ParseHostPort(addr);
  if (!hp.ok()) return hp.status();
  auto c = RdmaConnection::Connect(*hp, opt_.rdma_bounce_bytes, opt_.timeout);
  if (!c.ok()) return c.status();
  rdma_ = std::move(c).value();
  return Status::Ok();
}

// Leases for the whole batch are asked for together (pipelined), then every RDMA READ of
// the batch is posted together, then the leases are released.
std::vector<Result<EntryInfo>> Client::GetManyRdma(std::string_view ns,
                                                   const std::vector<std::string>& keys,
                                                   const std::vector<std::span<uint8_t>>& dsts) {
  std::vector<Result<EntryInfo>> out(keys.size(), Status::Unavailable("not attempted"));
  Status st;
  for (size_t i = 0; i < keys.size() && st.ok(); ++i) {
    BodyWriter w;
    w.Str(ns);
    w.Str(keys[i]);
    st = SendRequest(Op::kGetRdma, w.data());
  }
  std::vector<RemoteRead> reads;
  std::vector<size_t> read_of;
  std::vector<uint64_t> leases;
  for (size_t i = 0; i < keys.size() && st.ok(); ++i) {
    auto body = ReadReply(Op::kGetRdmaOk);
    if (!body.ok()) {
      if (body.status().IsUnavailable()) st = body.status();
      out[i] = body.status();
      continue;
    }
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint64_t lease, addr;
    uint32_t rkey;
    EntryInfo info;
    if (!r.U64(&lease) || !r.U64(&addr) || !r.U32(&rkey) || !ReadInfo(&r, &info)) {
      st = Status::Unavailable("malformed GET_RDMA reply");
      break;
    }
    leases.push_back(lease);
    info.ns = ns;
    info.key = keys[i];
    if (dsts[i].size() < info.bytes) {
      out[i] =
          Status::InvalidArgument("destination buffer holds " + std::to_string(dsts[i].size()) +
                                  " bytes but the entry has " + std::to_string(info.bytes));
      continue;
    }
    reads.push_back({addr, rkey, info.bytes, dsts[i].data()});
    read_of.push_back(i);
    out[i] = info;
  }
  if (st.ok() && !reads.empty()) st = rdma_->ReadMany(reads);
  if (!st.ok()) {
    for (size_t i : read_of) out[i] = st;
    for (auto& o : out)
      if (o.ok() || o.status().message() == "not attempted") o = st;
    fd_.reset();
    rdma_.reset();
    return out;
  }
  for (uint64_t lease : leases) Release(reinterpret_cast<void*>(lease));
  return out;
}

Result<ReadLease> Client::AcquireShared(std::string_view ns, std::string_view key) {
  return WithRetry([&]() -> Result<ReadLease> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kGetShm, KeyBody(ns, key)));
    auto body = ReadReply(Op::kGetShmOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint64_t lease_id, offset;
    EntryInfo info;
    if (!r.U64(&lease_id) || !r.U64(&offset) || !ReadInfo(&r, &info) ||
        offset + info.bytes > map_bytes_)
      return Status::Unavailable("malformed GET_SHM reply");
    info.ns = ns;
    info.key = key;
    // The token is the server's lease id (never 0: the server numbers leases from 1).
    return ReadLease(this, reinterpret_cast<void*>(lease_id), map_ + offset, std::move(info));
  });
}

void Client::Release(void* token) {
  BodyWriter w;
  w.U64(reinterpret_cast<uint64_t>(token));
  // No reply; a lost RELEASE (the connection died) is covered by the server's lease TTL and
  // by its dropping a connection's leases when the connection closes.
  (void)SendRequest(Op::kRelease, w.data());
}

Result<ReadLease> Client::Pin(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  return WithRetry([&]() -> Result<ReadLease> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kPin, KeyBody(ns, key)));
    auto body = ReadReply(Op::kPinOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint64_t lease_id;
    EntryInfo info;
    if (!r.U64(&lease_id) || !ReadInfo(&r, &info))
      return Status::Unavailable("malformed PIN reply");
    info.ns = ns;
    info.key = key;
    return ReadLease(this, reinterpret_cast<void*>(lease_id), nullptr, std::move(info));
  });
}

namespace {
class OwnedBuffer : public ReadLease::Releaser {
 public:
  void Release(void* token) override { delete[] static_cast<uint8_t*>(token); }
};
OwnedBuffer owned_buffer;
}  // namespace

Result<ReadLease> Client::Acquire(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  if (shm_) return AcquireShared(ns, key);
  std::unique_ptr<uint8_t[]> buf;
  auto alloc = [&](const EntryInfo& info) {
    buf.reset(new uint8_t[std::max<uint64_t>(info.bytes, 1)]);
    return std::span<uint8_t>(buf.get(), info.bytes);
  };
  Result<EntryInfo> got = Status::Unavailable("not attempted");
  if (rdma_ || opt_.transport == "rdma") {
    // RDMA needs the size before the read: look it up; a replaced entry of another size in
    // between shows as a too-small buffer, and is looked up once more.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto found = Lookup(ns, key);
      if (!found.ok()) return found.status();
      got = Get(ns, key, alloc(*found));
      if (got.ok() || !got.status().IsInvalidArgument()) break;
    }
  } else {
    got = WithRetry([&]() -> Result<EntryInfo> {
      EC_RETURN_IF_ERROR(SendRequest(Op::kGet, KeyBody(ns, key)));
      EntryInfo info;
      EC_RETURN_IF_ERROR(ReadGetReply(alloc, &info));
      info.ns = ns;
      info.key = key;
      return info;
    });
  }
  if (!got.ok()) return got.status();
  const uint8_t* data = buf.get();
  return ReadLease(&owned_buffer, buf.release(), data, std::move(got).value());
}

std::vector<Result<EntryInfo>> Client::GetMany(std::string_view ns,
                                               const std::vector<std::string>& keys,
                                               const std::vector<std::span<uint8_t>>& dsts) {
  std::vector<Result<EntryInfo>> out;
  if (keys.size() != dsts.size()) {
    out.assign(keys.size(), Status::InvalidArgument("GetMany needs one buffer per key"));
    return out;
  }
  if (rdma_) return GetManyRdma(ns, keys, dsts);
  if (shm_) {  // each get is a small round trip and a copy from the mapping
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(Get(ns, keys[i], dsts[i]));
    return out;
  }
  Status st = fd_.valid() ? Status::Ok() : Reconnect();
  for (size_t i = 0; i < keys.size() && st.ok(); ++i) {
    Status v = ValidateKey(keys[i]);
    st = SendRequest(Op::kGet, KeyBody(ns, v.ok() ? keys[i] : "?"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!st.ok()) {
      out.push_back(st);
      continue;
    }
    EntryInfo info;
    Status r = ReadGetReply(dsts[i], &info);
    if (r.IsUnavailable()) st = r;  // the stream is gone: every later reply fails too
    if (!r.ok()) {
      out.push_back(r);
      continue;
    }
    info.ns = ns;
    info.key = keys[i];
    out.push_back(info);
  }
  if (!st.ok()) fd_.reset();
  return out;
}

Result<EntryInfo> Client::Lookup(std::string_view ns, std::string_view key) {
  auto found = LookupMany(ns, {std::string(key)});
  if (!found.ok()) return found.status();
  if (!(*found)[0])
    return Status::NotFound("no entry for key '" + std::string(key) + "' in namespace '" +
                            std::string(ns) + "'");
  return std::move(*(*found)[0]);
}

Result<std::vector<std::optional<EntryInfo>>> Client::LookupMany(
    std::string_view ns, const std::vector<std::string>& keys) {
  if (keys.empty() || keys.size() > kMaxBatch)
    return Status::InvalidArgument("Lookup takes 1.." + std::to_string(kMaxBatch) + " keys");
  BodyWriter w;
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    w.Str(ns);
    w.Str(k);
  }
  return WithRetry([&]() -> Result<std::vector<std::optional<EntryInfo>>> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kLookup, w.data()));
    auto body = ReadReply(Op::kLookupOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint32_t n;
    if (!r.U32(&n) || n != keys.size()) return Status::Unavailable("malformed LOOKUP reply");
    std::vector<std::optional<EntryInfo>> out(n);
    for (uint32_t i = 0; i < n; ++i) {
      uint8_t found;
      if (!r.U8(&found)) return Status::Unavailable("malformed LOOKUP reply");
      if (!found) continue;
      EntryInfo e;
      if (!ReadInfo(&r, &e)) return Status::Unavailable("malformed LOOKUP reply");
      e.ns = ns;
      e.key = keys[i];
      out[i] = e;
    }
    return out;
  });
}

Status Client::Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
                   std::span<const uint8_t> bytes) {
  EC_RETURN_IF_ERROR(ValidateNewNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateNewKey(key));
  EC_RETURN_IF_ERROR(ValidateMeta(meta, bytes.size()));
  if (bytes.size() > kMaxPayload)
    return Status::InvalidArgument("entry exceeds the protocol's 1 GiB limit");
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  w.Meta(meta);
  auto r = WithRetry([&]() -> Result<std::string> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kPut, w.data(), bytes));
    return ReadReply(Op::kOk);
  });
  return r.status();
}

Status Client::Erase(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  auto r = WithRetry([&]() -> Result<std::string> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kErase, KeyBody(ns, key)));
    return ReadReply(Op::kOk);
  });
  return r.status();
}

Status Client::EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                         std::vector<bool>* erased) {
  erased->assign(ns_keys.size(), false);
  for (size_t i = 0; i < ns_keys.size(); ++i) {
    Status st = Erase(ns_keys[i].first, ns_keys[i].second);
    if (st.IsNotFound()) continue;
    EC_RETURN_IF_ERROR(st);
    (*erased)[i] = true;
  }
  return Status::Ok();
}

Status Client::ListPages(size_t page_size,
                         const std::function<bool(std::vector<EntryInfo>&&)>& on_page) {
  if (page_size == 0) return Status::InvalidArgument("ListPages needs a page size above 0");
  const uint32_t limit = static_cast<uint32_t>(std::min<size_t>(page_size, kListPage));
  for (uint32_t offset = 0;;) {
    BodyWriter w;
    w.U32(offset);
    w.U32(limit);
    bool more = false;
    auto page = WithRetry([&]() -> Result<std::vector<EntryInfo>> {
      EC_RETURN_IF_ERROR(SendRequest(Op::kList, w.data()));
      auto body = ReadReply(Op::kListOk);
      if (!body.ok()) return body.status();
      BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
      uint32_t n;
      uint8_t m;
      if (!r.U32(&n) || !r.U8(&m) || n > limit) return Status::Unavailable("malformed LIST reply");
      std::vector<EntryInfo> out(n);
      for (auto& e : out)
        if (!r.Str(&e.ns, kMaxNamespaceBytes) || !r.Str(&e.key, kMaxKeyBytes) || !ReadInfo(&r, &e))
          return Status::Unavailable("malformed LIST reply");
      more = m;
      return out;
    });
    if (!page.ok()) return page.status();
    offset += static_cast<uint32_t>(page->size());
    if (page->empty() || !on_page(std::move(page).value()) || !more) return Status::Ok();
  }
}

Result<StoreStats> Client::Stats() {
  return WithRetry([&]() -> Result<StoreStats> {
    EC_RETURN_IF_ERROR(SendRequest(Op::kStats, {}));
    auto body = ReadReply(Op::kStatsOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint32_t n;
    if (!r.U32(&n) || n != r.remaining()) return Status::Unavailable("malformed STATS reply");
    auto stats = StatsFromJson({reinterpret_cast<const char*>(r.position()), n});
    if (!stats.ok())
      return Status::Unavailable("malformed STATS reply: " + stats.status().message());
    return stats;
  });
}

}  // namespace ecstore::net
