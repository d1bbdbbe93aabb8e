#include "net/protocol.h"

#include <algorithm>
#include <cstring>

#include "net/op_table.h"

namespace ecstore::net {

bool IsKnownOp(uint16_t op) { return FindOp(op) != nullptr; }

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]) {
  uint32_t magic = kMagic;
  uint16_t op = static_cast<uint16_t>(h.op);
  std::memcpy(out, &magic, 4);
  std::memcpy(out + 4, &h.version, 2);
  std::memcpy(out + 6, &op, 2);
  std::memcpy(out + 8, &h.request_id, 8);
  std::memcpy(out + 16, &h.body_len, 8);
}

Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes]) {
  uint32_t magic;
  uint16_t op;
  FrameHeader h;
  std::memcpy(&magic, in, 4);
  std::memcpy(&h.version, in + 4, 2);
  std::memcpy(&op, in + 6, 2);
  std::memcpy(&h.request_id, in + 8, 8);
  std::memcpy(&h.body_len, in + 16, 8);
  if (magic != kMagic) return Status::InvalidArgument("not an ec-store frame (bad magic)");
  if (h.version != kVersion)
    return Status::InvalidArgument("protocol version " + std::to_string(h.version) +
                                   " is not supported (this side speaks " +
                                   std::to_string(kVersion) + "); upgrade the older side");
  if (!IsKnownOp(op)) return Status::InvalidArgument("unknown opcode " + std::to_string(op));
  h.op = static_cast<Op>(op);
  bool carries_tensor = h.op == Op::kPut || h.op == Op::kGetOk;  // others are metadata
  uint64_t limit = carries_tensor ? kMaxPayload + kMaxMetaBody : kMaxMetaBody;
  if (h.body_len > limit)
    return Status::InvalidArgument("frame body of " + std::to_string(h.body_len) +
                                   " bytes exceeds the limit of " + std::to_string(limit));
  return h;
}

void BodyWriter::Str(std::string_view s) {
  U16(static_cast<uint16_t>(s.size()));
  Raw(s.data(), s.size());
}

void BodyWriter::Meta(const TensorMeta& m) {
  U32(static_cast<uint32_t>(m.dtype));
  U8(static_cast<uint8_t>(m.shape.size()));
  for (int64_t d : m.shape) U64(static_cast<uint64_t>(d));
  F64(m.recompute_cost);
}

bool BodyReader::Raw(void* out, size_t n) {
  if (remaining() < n) return false;
  std::memcpy(out, p_, n);
  p_ += n;
  return true;
}

bool BodyReader::Str(std::string* s, size_t max_len) {
  uint16_t n;
  if (!U16(&n) || n > max_len || remaining() < n) return false;
  s->assign(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return true;
}

bool BodyReader::Meta(TensorMeta* m) {
  uint32_t dtype;
  uint8_t ndim;
  if (!U32(&dtype) || !U8(&ndim) || ndim > TensorMeta::kMaxDims || !IsKnownDType(dtype))
    return false;
  m->dtype = static_cast<DType>(dtype);
  m->shape.resize(ndim);
  for (auto& d : m->shape) {
    uint64_t v;
    if (!U64(&v)) return false;
    d = static_cast<int64_t>(v);
  }
  return F64(&m->recompute_cost);
}

Result<KeyRef> ParseKeyBody(BodyReader* r) {
  KeyRef k;
  if (!r->Str(&k.ns, kMaxNamespaceBytes) || !r->Str(&k.key, kMaxKeyBytes))
    return Status::InvalidArgument("malformed key: namespace ≤ 128 and key ≤ 256 bytes");
  EC_RETURN_IF_ERROR(ValidateNamespace(k.ns));
  EC_RETURN_IF_ERROR(ValidateKey(k.key));
  return k;
}

Result<std::vector<KeyRef>> ParseLookupBody(BodyReader* r) {
  uint32_t n;
  if (!r->U32(&n) || n > kMaxBatch)
    return Status::InvalidArgument("batch must hold 1.." + std::to_string(kMaxBatch) + " keys");
  std::vector<KeyRef> keys;
  for (uint32_t i = 0; i < n; ++i) {
    auto k = ParseKeyBody(r);
    if (!k.ok()) return k.status();
    keys.push_back(std::move(k).value());
  }
  return keys;
}

std::string EraseManyReplyBody(const std::vector<bool>& erased, const Status& durable) {
  BodyWriter w;
  w.U32(static_cast<uint32_t>(erased.size()));
  for (bool e : erased) w.U8(e);
  w.U8(durable.ok());
  if (!durable.ok()) w.Raw(ErrorBody(durable).data(), ErrorBody(durable).size());
  return w.data();
}

std::string EraseManyBody(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                          size_t at, size_t n) {
  BodyWriter w;
  w.U32(static_cast<uint32_t>(n));
  for (size_t i = at; i < at + n; ++i) {
    w.Str(ns_keys[i].first);
    w.Str(ns_keys[i].second);
  }
  return w.data();
}

Status ParseEraseManyReply(BodyReader* r, size_t n, std::vector<bool>* erased, Status* durable) {
  uint32_t got;
  uint8_t ok;
  if (!r->U32(&got) || got != n) return Status::Unavailable("malformed ERASE_MANY reply");
  erased->assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    uint8_t e;
    if (!r->U8(&e) || e > 1) return Status::Unavailable("malformed ERASE_MANY reply");
    (*erased)[i] = e;
  }
  if (!r->U8(&ok) || ok > 1) return Status::Unavailable("malformed ERASE_MANY reply");
  *durable = ok ? Status::Ok() : ParseErrorBody(r);
  return Status::Ok();
}

bool IsRequest(Op op, bool shm, bool rdma) {
  const OpRow* r = FindOp(op);
  if (!r || !r->request) return false;
  switch (r->via) {
    case Via::kAny:
      return true;
    case Via::kShm:
      return shm;
    case Via::kRdma:
      return rdma && !shm;
  }
  return false;
}

bool ReadsPoolInPlace(Op op) {
  const OpRow* r = FindOp(op);
  return r && r->in_place;
}

std::string KeysBody(std::string_view ns, const std::vector<std::string>& keys) {
  BodyWriter w;
  w.Str(ns);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) w.Str(k);
  return w.data();
}

Result<KeysRef> ParseKeysBody(BodyReader* r) {
  KeysRef out;
  uint32_t n;
  if (!r->Str(&out.ns, kMaxNamespaceBytes) || !r->U32(&n) || n == 0 || n > kMaxLeaseBatch)
    return Status::InvalidArgument("a batch takes a namespace and 1.." +
                                   std::to_string(kMaxLeaseBatch) + " keys");
  EC_RETURN_IF_ERROR(ValidateNamespace(out.ns));
  out.keys.resize(n);
  for (std::string& k : out.keys)
    if (!r->Str(&k, kMaxKeyBytes))
      return Status::InvalidArgument("malformed key in a batch: keys are at most 256 bytes");
  return out;
}

std::string ErrorBody(const Status& st) {
  BodyWriter w;
  w.U16(static_cast<uint16_t>(st.code()));
  std::string msg = st.message().substr(0, 4096);
  w.Str(msg);
  return w.data();
}

Status ParseErrorBody(BodyReader* r) {
  uint16_t code;
  std::string msg;
  if (!r->U16(&code) || !r->Str(&msg, 4096) || code == 0 ||
      code > static_cast<uint16_t>(Status::Code::kPermissionDenied))
    return Status::Corruption("malformed error frame from the server");
  switch (static_cast<Status::Code>(code)) {
    case Status::Code::kNotFound:
      return Status::NotFound(msg);
    case Status::Code::kCorruption:
      return Status::Corruption(msg);
    case Status::Code::kIOError:
      return Status::IOError(msg);
    case Status::Code::kNoSpace:
      return Status::NoSpace(msg);
    case Status::Code::kBusy:
      return Status::Busy(msg);
    case Status::Code::kInvalidArgument:
      return Status::InvalidArgument(msg);
    case Status::Code::kPermissionDenied:
      return Status::PermissionDenied(msg);
    default:
      return Status::Unavailable(msg);
  }
}

std::string HelloBody(const HelloInfo& h) {
  BodyWriter w;
  w.U16(h.version);
  w.Str(h.transport);
  w.U64(h.pool_bytes);
  w.Str(h.shm_path);
  w.Str(h.rdma_addr);
  w.U32(h.features);
  return w.data();
}

bool ParseHelloBody(BodyReader* r, HelloInfo* h) {
  h->features = 0;
  if (!r->U16(&h->version) || !r->Str(&h->transport, 16) || !r->U64(&h->pool_bytes) ||
      !r->Str(&h->shm_path, 4096) || !r->Str(&h->rdma_addr, 256))
    return false;
  return r->remaining() == 0 || r->U32(&h->features);  // none from an older server
}

void WriteInfo(BodyWriter* w, const EntryInfo& e) {
  w->U8(e.tiers.bits());
  w->U8(0);  // reserved
  w->U64(e.bytes);
  w->Meta(e.meta);
  w->U64(e.created_us);
  w->U64(e.last_access_us);
  w->U64(e.hits);
  w->U64(e.checksum);
}

bool ReadInfo(BodyReader* r, EntryInfo* e) {
  uint8_t tiers, reserved;
  if (!r->U8(&tiers) || !r->U8(&reserved) || !r->U64(&e->bytes) || !r->Meta(&e->meta) ||
      !r->U64(&e->created_us) || !r->U64(&e->last_access_us) || !r->U64(&e->hits) ||
      !r->U64(&e->checksum))
    return false;
  e->tiers = TierSet::FromBits(tiers);
  return true;
}

Result<std::string> PutHeadBody(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                uint64_t size) {
  EC_RETURN_IF_ERROR(ValidateNewNamespace(ns));
  EC_RETURN_IF_ERROR(ValidateNewKey(key));
  EC_RETURN_IF_ERROR(ValidateMeta(meta, size));
  if (size > kMaxPayload)
    return Status::InvalidArgument("entry exceeds the protocol's 1 GiB limit");
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  w.Meta(meta);
  return w.data();
}

Status ParseListReply(const std::string& body, uint32_t limit, std::vector<EntryInfo>* out,
                      bool* more) {
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  uint32_t n;
  uint8_t m;
  if (!r.U32(&n) || !r.U8(&m) || n > limit) return Status::Unavailable("malformed LIST reply");
  out->assign(n, EntryInfo{});
  for (auto& e : *out)
    if (!r.Str(&e.ns, kMaxNamespaceBytes) || !r.Str(&e.key, kMaxKeyBytes) || !ReadInfo(&r, &e))
      return Status::Unavailable("malformed LIST reply");
  *more = m;
  return Status::Ok();
}

Result<std::string_view> JsonReplyText(const std::string& body) {
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  uint32_t n;
  if (!r.U32(&n) || n != r.remaining()) return Status::Unavailable("malformed JSON reply");
  return std::string_view(reinterpret_cast<const char*>(r.position()), n);
}

bool SameToken(const std::string& given, const std::string& secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ secret[i % std::max<size_t>(secret.size(), 1)]);
  return diff == 0;
}

}  // namespace ecstore::net
