#include "net/client.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "cache/stats_json.h"
#include "cache/told_copies.h"

namespace ecstore::net {
namespace {

const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(const std::string& uri,
                                                const ClientOptions& options) {
  std::unique_ptr<Client> c;
  if (uri.rfind("unix:", 0) == 0) {
    if (options.transport == TransportKind::kTcp || options.transport == TransportKind::kRdma)
      return Status::InvalidArgument(std::string("transport ") +
                                     TransportKindName(options.transport) +
                                     " needs a HOST:PORT address; a unix: socket is shared memory");
    c.reset(new Client({}, uri.substr(5), options));
  } else {
    // A TCP address is chosen against as a server on another host until HELLO says more.
    EC_RETURN_IF_ERROR(ChooseTransport({.rdma = true}, options.transport).status());
    auto hp = ParseHostPort(uri);
    if (!hp.ok()) return hp.status();
    ClientOptions o = options;
    if (IsTlsAddress(uri) && !o.tls) o.tls = TlsOptions{};  // the system's CAs, the host's name
    c.reset(new Client(*hp, "", std::move(o)));
  }
  EC_RETURN_IF_ERROR(c->link_.Open());
  return c;
}

Client::~Client() = default;

TransferStats Client::transfer_stats() const {
  const rdma::ReadCounters& r = link_.rdma_reads();
  return {r.direct_reads.load(), r.direct_bytes.load(), r.bounced_reads.load(),
          r.bounced_bytes.load()};
}

Result<bool> Client::RegisterPutMemoryWith(std::shared_ptr<MemoryRegistrar> registrar) {
  if (!caps().same_host_zero_copy) return false;
  EC_RETURN_IF_ERROR(RegisterArenasWith(std::move(registrar)));
  // Mapped and registered now, not at the first save (tens of milliseconds on a GPU host).
  PreparePutArena();
  PrepareDevicePuts();
  return true;
}

// Runs fn; on a transport failure (Unavailable) reconnects and tries again, boundedly.
template <typename Fn>
auto Client::WithRetry(Fn fn) -> decltype(fn()) {
  for (int attempt = 0;; ++attempt) {
    if (!link_.valid()) {
      Status st = link_.Open();
      if (!st.ok()) {
        if (attempt >= link_.options().retries) return st;
        continue;
      }
    }
    auto result = fn();
    const bool broken = StatusOf(result).IsUnavailable();
    if (!broken || attempt >= link_.options().retries) {
      if (broken) link_.Abandon();
      return result;
    }
    link_.Abandon();
  }
}

Result<EntryInfo> Client::Get(std::string_view ns, std::string_view key, std::span<uint8_t> dst) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  const std::vector<std::string> keys{std::string(key)};
  EC_RETURN_IF_ERROR(WithRetry([] { return Status::Ok(); }));  // connected, as a retry would
  // Same host, a server that streams leases: one GET_SHM_STREAM, a disk entry's pieces copied
  // out as they land (as GetMany's, which falls back and reconnects on its own).
  if (link_.transport()->caps().streamed_leases && !no_lease_batches_)
    return std::move(shm_reads_.CopyOutOfLeases(ns, keys, {dst})[0]);
  return WithRetry([&]() -> Result<EntryInfo> {
    if (link_.transport()->caps().same_host_zero_copy)  // one GET_SHM, a copy out of the mapping
      return CopyOut(link_.transport()->AcquireInPlace(link_, ns, key), dst);
    return std::move(link_.transport()->GetMany(link_, ns, keys, {dst})[0]);
  });
}

Result<ReadLease> Client::Pin(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  return WithRetry([&]() -> Result<ReadLease> {
    EC_RETURN_IF_ERROR(link_.SendRequest(Op::kPin, KeyBody(ns, key)));
    auto body = link_.ReadReply(Op::kPinOk);
    if (!body.ok()) return body.status();
    BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
    uint64_t lease_id;
    EntryInfo info;
    if (!r.U64(&lease_id) || !ReadInfo(&r, &info))
      return Status::Unavailable("malformed PIN reply");
    info.ns = ns;
    info.key = key;
    return ReadLease(link_.lease_releaser(), reinterpret_cast<void*>(lease_id), nullptr,
                     std::move(info));
  });
}

namespace {
class OwnedBuffer : public ReadLease::Releaser {
 public:
  void Release(void* token) override { delete[] static_cast<uint8_t*>(token); }
};
OwnedBuffer owned_buffer;
}  // namespace

Result<EntryInfo> Client::GetToDevice(std::string_view, std::string_view, void*, uint64_t) {
  return Status::InvalidArgument("a " + std::string(transport()) +
                                 " client has no device tier to copy from; load through host "
                                 "leases (GetManyToDevice)");
}

Result<ReadLease> Client::AcquireOnDevice(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  if (!link_.valid()) EC_RETURN_IF_ERROR(link_.Open());
  auto lease = WithRetry([&] { return link_.transport()->AcquireOnDevice(link_, ns, key); });
  // No device pool there (DEVICE_POOL refused): no more asking, callers read its host pool.
  if (!lease.ok() && lease.status().IsInvalidArgument() && caps().device_memory)
    no_device_pool_ = true;
  return lease;
}

Result<ReadLease> Client::Acquire(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  if (!link_.valid()) EC_RETURN_IF_ERROR(link_.Open());
  if (link_.transport()->caps().same_host_zero_copy)
    return WithRetry([&] { return link_.transport()->AcquireInPlace(link_, ns, key); });
  std::unique_ptr<uint8_t[]> buf;
  auto alloc = [&](const EntryInfo& info) {
    buf.reset(new uint8_t[std::max<uint64_t>(info.bytes, 1)]);
    return std::span<uint8_t>(buf.get(), info.bytes);
  };
  Result<EntryInfo> got = Status::Unavailable("not attempted");
  if (link_.transport()->caps().one_sided_read) {
    // A one-sided read needs the size first: look it up; a replaced entry of another size in
    // between shows as a too-small buffer, and is looked up once more.
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto found = Lookup(ns, key);
      if (!found.ok()) return found.status();
      got = Get(ns, key, alloc(*found));
      if (got.ok() || !got.status().IsInvalidArgument()) break;
    }
  } else {
    got = WithRetry([&]() -> Result<EntryInfo> {
      EC_RETURN_IF_ERROR(link_.SendRequest(Op::kGet, KeyBody(ns, key)));
      EntryInfo info;
      EC_RETURN_IF_ERROR(link_.ReadGetReply(alloc, &info));
      info.ns = ns;
      info.key = key;
      return info;
    });
  }
  if (!got.ok()) return got.status();
  const uint8_t* data = buf.get();
  return ReadLease(&owned_buffer, buf.release(), data, std::move(got).value());
}

// Batches of kMaxLeaseBatch valid keys (a bad key is answered here), each one GET_SHM_MANY,
// or with a watch and a server that streams, one GET_SHM_STREAM. A stream that breaks is
// asked again unwatched (its told copies were finished at the watch's last batch_end).
std::vector<Result<ReadLease>> Client::AcquireMany(std::string_view ns,
                                                   const std::vector<std::string>& keys,
                                                   LandingWatch* watch) {
  if (watch) watch->streamed.assign(keys.size(), false);
  Status st = ValidateNamespace(ns);
  if (st.ok() && !link_.valid()) st = link_.Open();
  if (!st.ok() || no_lease_batches_ || !caps().same_host_zero_copy)
    return Cache::AcquireMany(ns, keys, watch);  // each key answers for itself
  std::vector<std::optional<Result<ReadLease>>> slot(keys.size());
  std::vector<size_t> sent;  // the valid keys
  for (size_t i = 0; i < keys.size(); ++i) {
    Status valid = ValidateKey(keys[i]);
    if (valid.ok())
      sent.push_back(i);
    else
      slot[i] = valid;
  }
  for (size_t at = 0; at < sent.size(); at += kMaxLeaseBatch) {
    std::vector<std::string> chunk;
    for (size_t j = at; j < std::min(sent.size(), at + kMaxLeaseBatch); ++j)
      chunk.push_back(keys[sent[j]]);
    LandingWatch told;  // the watch, told in the caller's key numbers
    Result<std::vector<Result<ReadLease>>> got = Status::Unavailable("not asked");
    bool attempted = false;  // a streamed batch the server did not answer
    if (watch && caps().streamed_leases) {
      if (watch->landed)
        told.landed = [&](size_t k, const uint8_t* p, uint64_t n) {
          watch->landed(sent[at + k], p, n);
        };
      told.batch_end = watch->batch_end;
      got = link_.transport()->AcquireManyStreamed(link_, ns, chunk, &told);
      attempted = !got.ok() && got.status().IsUnavailable();
      if (!got.ok()) {
        if (told.batch_end) told.batch_end();
        told.streamed.clear();
        NoteRefusedBatch(got.status());
        link_.Abandon();  // out of step
      }
    }
    // A streamed batch the server did not answer was this call's attempt: asked again in
    // place only where retries allow (else a hung server would cost two deadlines).
    if (!got.ok() && !no_lease_batches_ && (!attempted || link_.options().retries > 0))
      got = WithRetry([&] { return link_.transport()->AcquireManyInPlace(link_, ns, chunk); });
    if (!got.ok()) NoteRefusedBatch(got.status());
    for (size_t j = 0; j < chunk.size(); ++j) {
      slot[sent[at + j]] = got.ok()            ? std::move((*got)[j])
                           : no_lease_batches_ ? Acquire(ns, chunk[j])
                                               : Result<ReadLease>(got.status());
      if (j < told.streamed.size()) watch->streamed[sent[at + j]] = told.streamed[j];
    }
  }
  std::vector<Result<ReadLease>> out;
  out.reserve(keys.size());
  for (auto& s : slot) out.push_back(std::move(*s));
  return out;
}

Result<bool> Client::Prefetch(std::string_view ns, const std::vector<std::string>& keys) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  for (const std::string& k : keys) EC_RETURN_IF_ERROR(ValidateKey(k));
  bool queued = true;
  for (size_t at = 0; at < keys.size(); at += kMaxLeaseBatch) {
    const std::vector<std::string> chunk(keys.begin() + at,
                                         keys.begin() + std::min(keys.size(), at + kMaxLeaseBatch));
    auto got = WithRetry([&]() -> Result<bool> {
      if (!(link_.server_features() & kFeaturePrefetch)) return false;
      EC_RETURN_IF_ERROR(link_.SendRequest(Op::kPrefetch, KeysBody(ns, chunk)));
      auto body = link_.ReadReply(Op::kOk);
      if (!body.ok()) return body.status();
      if (body->size() != 1) return Status::Unavailable("malformed PREFETCH reply");
      return (*body)[0] != 0;
    });
    if (!got.ok()) return got.status();
    queued = queued && *got;
  }
  return queued;
}

Result<ClaimAnswer> Client::Claim(std::string_view ns, std::string_view key,
                                  std::chrono::milliseconds ttl) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  if (ttl.count() <= 0) return Status::InvalidArgument("a claim needs a TTL above 0 ms");
  return WithRetry([&]() -> Result<ClaimAnswer> {
    if (!(link_.server_features() & kFeatureClaims)) return ClaimAnswer{};
    EC_RETURN_IF_ERROR(link_.SendRequest(
        Op::kClaim,
        ClaimBody(ns, key, static_cast<uint32_t>(std::min<int64_t>(ttl.count(), 60'000)))));
    auto body = link_.ReadReply(Op::kOk);
    if (!body.ok()) return body.status();
    return ParseClaimReply(*body);
  });
}

// An older server answers a batch opcode it lacks "unknown opcode" and hangs up: the
// connection is dropped (the next request reconnects), and the caller goes key by key.
void Client::NoteRefusedBatch(const Status& st) {
  if (AbandonIfUnknownOp(&link_, st)) no_lease_batches_ = true;
}

std::vector<Result<EntryInfo>> Client::GetMany(std::string_view ns,
                                               const std::vector<std::string>& keys,
                                               const std::vector<std::span<uint8_t>>& dsts) {
  std::vector<Result<EntryInfo>> out;
  if (keys.size() != dsts.size()) {
    out.assign(keys.size(), Status::InvalidArgument("GetMany needs one buffer per key"));
    return out;
  }
  Status st = link_.valid() ? Status::Ok() : link_.Open();
  if (!st.ok()) {
    out.assign(keys.size(), st);
    return out;
  }
  if (!link_.transport()->caps().one_sided_read)
    for (const auto& d : dsts)
      if (link_.InRegisteredDevice(d)) {  // only the NIC writes device memory here
        out.assign(keys.size(),
                   Status::Unavailable("a destination is device memory, which only RDMA reads "
                                       "land in, and this connection is no longer over RDMA; "
                                       "get it through GetIntoBuffers (staged)"));
        return out;
      }
  if (link_.transport()->caps().same_host_zero_copy)
    return shm_reads_.CopyOutOfLeases(ns, keys, dsts);
  out = link_.transport()->GetMany(link_, ns, keys, dsts);
  for (const auto& r : out)
    if (!r.ok() && r.status().IsUnavailable()) link_.Abandon();  // reconnect on the next call
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
    EC_RETURN_IF_ERROR(link_.SendRequest(Op::kLookup, w.data()));
    auto body = link_.ReadReply(Op::kLookupOk);
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
  auto head = PutHeadBody(ns, key, meta, bytes.size());
  if (!head.ok()) return head.status();
  return WithRetry([&] { return link_.transport()->Put(link_, *head, bytes); });
}

Result<ArenaReservation> Client::ReservePut(std::string_view ns, std::string_view key,
                                            const TensorMeta& meta, uint64_t size, bool landing) {
  auto head = PutHeadBody(ns, key, meta, size);
  if (!head.ok()) return head.status();
  return WithRetry([&] { return link_.transport()->ReservePut(link_, *head, size, landing); });
}

Status Client::PreparePutArena() {
  return WithRetry([&] { return link_.transport()->PreparePutArena(link_); });
}

Status Client::PutFromDevice(std::string_view ns, std::string_view key, const TensorMeta& meta,
                             const void* src, uint64_t size, bool checksum_when_spilled) {
  auto head = PutHeadBody(ns, key, meta, size);
  if (!head.ok()) return head.status();
  const uint8_t flags = checksum_when_spilled ? kPutChecksumWhenSpilled : 0;
  Status st =
      WithRetry([&] { return link_.transport()->PutFromDevice(link_, *head, src, size, flags); });
  // Refused memory (a GPU the server does not see, a VMM allocation): no more asking.
  if (st.IsInvalidArgument() && caps().device_puts) device_puts_refused_ = true;
  return st;
}

std::vector<Status> Client::PutManyFromDevice(std::string_view ns,
                                              const std::vector<DeviceSource>& items,
                                              bool checksum_when_spilled) {
  std::vector<Status> out(items.size(), Status::Ok());
  std::vector<DeviceSource> valid;  // those whose PUT head is well formed
  std::vector<size_t> at;
  for (size_t i = 0; i < items.size(); ++i) {
    auto head = PutHeadBody(ns, items[i].key, items[i].meta, items[i].bytes);
    if (!head.ok()) {
      out[i] = head.status();
      continue;
    }
    valid.push_back(items[i]);
    at.push_back(i);
  }
  if (valid.empty()) return out;
  const uint8_t flags = checksum_when_spilled ? kPutChecksumWhenSpilled : 0;
  std::vector<Status> got;
  Status st = WithRetry(
      [&] { return link_.transport()->PutManyFromDevice(link_, ns, valid, flags, &got); });
  if (st.IsInvalidArgument() && got.empty())  // not offered: one PUT_DEVICE each
    got = DeviceIo::PutManyFromDevice(ns, valid, checksum_when_spilled);
  else if (!st.ok())
    got.assign(valid.size(), st);
  for (size_t k = 0; k < at.size(); ++k) {
    // Refused memory (a GPU the server does not see, a VMM allocation): no more asking.
    if (got[k].IsInvalidArgument() && caps().device_puts) device_puts_refused_ = true;
    out[at[k]] = std::move(got[k]);
  }
  return out;
}

Status Client::PrepareDevicePuts() {
  return WithRetry([&] { return link_.transport()->PrepareDevicePuts(link_); });
}

Status Client::CommitPut(ArenaReservation r, bool checksum_when_spilled) {
  if (!r.arena()) return Status::InvalidArgument("this reservation was committed or dropped");
  return WithRetry([&] { return link_.transport()->CommitPut(link_, r, checksum_when_spilled); });
}

Status Client::Erase(std::string_view ns, std::string_view key) {
  EC_RETURN_IF_ERROR(ValidateNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateKey(key));
  auto r = WithRetry([&]() -> Result<std::string> {
    EC_RETURN_IF_ERROR(link_.SendRequest(Op::kErase, KeyBody(ns, key)));
    return link_.ReadReply(Op::kOk);
  });
  return r.status();
}

// ERASE_MANY batches of up to kMaxBatch keys, each one durable tombstone write on the server.
// Every key is checked first (a bad one erases nothing). A batch whose tombstones failed
// (NoSpace: "erased, but not durably yet") does not stop the others, as Store::EraseMany
// erases every key before it returns that error; the first such error is returned. An
// older server answers "unknown opcode" and hangs up: key by key from then on.
Status Client::EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                         std::vector<bool>* erased) {
  erased->assign(ns_keys.size(), false);
  for (const auto& [ns, key] : ns_keys) {
    EC_RETURN_IF_ERROR(ValidateNamespace(ns));
    EC_RETURN_IF_ERROR(ValidateKey(key));
  }
  Status first;
  for (size_t at = 0; at < ns_keys.size(); at += kMaxBatch) {
    const size_t n = std::min<size_t>(kMaxBatch, ns_keys.size() - at);
    std::vector<bool> got;
    Status durable;
    Status st = Status::Unavailable("key by key");
    if (!no_erase_batches_) {
      const std::string request = EraseManyBody(ns_keys, at, n);
      auto body = WithRetry([&]() -> Result<std::string> {
        EC_RETURN_IF_ERROR(link_.SendRequest(Op::kEraseMany, request));
        return link_.ReadReply(Op::kEraseManyOk);
      });
      st = body.status();
      if (body.ok()) {
        BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
        st = ParseEraseManyReply(&r, n, &got, &durable);
      }
    }
    if (!st.ok() && AbandonIfUnknownOp(&link_, st)) no_erase_batches_ = true;
    if (no_erase_batches_) {
      for (size_t i = at; i < at + n; ++i) {
        Status one = Erase(ns_keys[i].first, ns_keys[i].second);
        if (one.IsNotFound()) continue;
        EC_RETURN_IF_ERROR(one);
        (*erased)[i] = true;
      }
      continue;
    }
    EC_RETURN_IF_ERROR(st);
    for (size_t i = 0; i < n; ++i) (*erased)[at + i] = got[i];
    if (first.ok()) first = durable;
  }
  return first;
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
      EC_RETURN_IF_ERROR(link_.SendRequest(Op::kList, w.data()));
      auto body = link_.ReadReply(Op::kListOk);
      if (!body.ok()) return body.status();
      std::vector<EntryInfo> out;
      EC_RETURN_IF_ERROR(ParseListReply(*body, limit, &out, &more));
      return out;
    });
    if (!page.ok()) return page.status();
    offset += static_cast<uint32_t>(page->size());
    if (page->empty() || !on_page(std::move(page).value()) || !more) return Status::Ok();
  }
}

Result<StoreStats> Client::Stats() {
  return WithRetry([&]() -> Result<StoreStats> {
    EC_RETURN_IF_ERROR(link_.SendRequest(Op::kStats, {}));
    auto body = link_.ReadReply(Op::kStatsOk);
    if (!body.ok()) return body.status();
    auto js = JsonReplyText(*body);
    if (!js.ok()) return js.status();
    auto stats = StatsFromJson(*js);
    if (!stats.ok())
      return Status::Unavailable("malformed STATS reply: " + stats.status().message());
    return stats;
  });
}

}  // namespace ecstore::net
