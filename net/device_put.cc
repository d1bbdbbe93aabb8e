#include "net/device_put.h"

#include "net/protocol.h"

namespace ecstore::net {

std::string PutDeviceBody(const std::string& head, const cuda::DeviceAllocation& a,
                          const std::string& handle, uint64_t offset, uint64_t size,
                          uint8_t flags) {
  BodyWriter w;
  w.Raw(head.data(), head.size());
  w.Str(a.bus_id);
  w.Str(handle);
  w.U64(a.buffer_id);
  w.U64(offset);
  w.U64(size);
  w.U8(flags);
  return w.data();
}

std::string PutDeviceManyBody(const DevicePutBatch& batch) {
  BodyWriter w;
  w.Str(batch.ns);
  w.U8(batch.flags);
  w.U32(static_cast<uint32_t>(batch.items.size()));
  for (const DevicePutItem& i : batch.items) {
    w.Str(i.key);
    w.Meta(i.meta);
    w.Str(i.bus_id);
    w.Str(i.handle);
    w.U64(i.buffer_id);
    w.U64(i.offset);
    w.U64(i.size);
  }
  return w.data();
}

Result<DevicePutBatch> ParsePutDeviceManyBody(BodyReader* r) {
  DevicePutBatch b;
  uint32_t n;
  if (!r->Str(&b.ns, kMaxNamespaceBytes) || !r->U8(&b.flags) || !r->U32(&n) || n == 0 ||
      n > kMaxDevicePutBatch || (b.flags & ~kPutChecksumWhenSpilled))
    return Status::InvalidArgument("malformed PUT_DEVICE_MANY: a namespace, flags and 1.." +
                                   std::to_string(kMaxDevicePutBatch) + " items");
  EC_RETURN_IF_ERROR(ValidateNamespace(b.ns));
  b.items.resize(n);
  for (DevicePutItem& i : b.items)
    if (!r->Str(&i.key, kMaxKeyBytes) || !r->Meta(&i.meta) || !r->Str(&i.bus_id, 64) ||
        !r->Str(&i.handle, 256) || !r->U64(&i.buffer_id) || !r->U64(&i.offset) || !r->U64(&i.size))
      return Status::InvalidArgument("malformed PUT_DEVICE_MANY item");
  if (r->remaining() != 0) return Status::InvalidArgument("PUT_DEVICE_MANY has trailing bytes");
  return b;
}

std::string PutDeviceManyReplyBody(const std::vector<Status>& items) {
  BodyWriter w;
  w.U32(static_cast<uint32_t>(items.size()));
  for (const Status& st : items) {
    w.U8(st.ok());
    if (st.ok()) continue;
    const std::string err = ErrorBody(st);
    w.Raw(err.data(), err.size());
  }
  return w.data();
}

Status ParsePutDeviceManyReply(BodyReader* r, size_t n, std::vector<Status>* out) {
  uint32_t got;
  if (!r->U32(&got) || got != n) return Status::Unavailable("malformed PUT_DEVICE_MANY_OK");
  out->clear();
  for (size_t i = 0; i < n; ++i) {
    uint8_t ok;
    if (!r->U8(&ok) || ok > 1) return Status::Unavailable("malformed PUT_DEVICE_MANY_OK");
    out->push_back(ok ? Status::Ok() : ParseErrorBody(r));
  }
  return Status::Ok();
}

}  // namespace ecstore::net
