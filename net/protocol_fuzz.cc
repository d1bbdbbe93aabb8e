// libFuzzer target for the wire-protocol parser: every byte string must be rejected with a
// Status or parsed, never crash, hang or read out of bounds (built with ASan by
// tests/fuzz_protocol.sh).
#include <cstddef>
#include <cstdint>

#include "net/device_put.h"
#include "net/protocol.h"

using namespace ecstore;
using namespace ecstore::net;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kHeaderBytes) {
    auto h = DecodeHeader(data);
    if (h.ok()) {
      uint8_t again[kHeaderBytes];
      EncodeHeader(*h, again);
      if (DecodeHeader(again)->request_id != h->request_id) __builtin_trap();
    }
  }
  // Every body parser the server and client run on received bytes.
  {
    BodyReader r(data, size);
    (void)ParseKeyBody(&r);
  }
  {
    BodyReader r(data, size);
    (void)ParseLookupBody(&r);
  }
  {
    BodyReader r(data, size);
    (void)ParseKeysBody(&r);
  }
  {
    BodyReader r(data, size);
    (void)ParseErrorBody(&r);
  }
  {
    BodyReader r(data, size);
    std::vector<bool> erased;
    Status durable;
    (void)ParseEraseManyReply(&r, size % 8, &erased, &durable);
  }
  {
    BodyReader r(data, size);
    HelloInfo h;
    (void)ParseHelloBody(&r, &h);
    const std::string body(reinterpret_cast<const char*>(data), size);
    std::vector<EntryInfo> page;
    bool more;
    (void)ParseListReply(body, static_cast<uint32_t>(size % 64), &page, &more);
    (void)JsonReplyText(body);
  }
  {
    BodyReader r(data, size);
    auto b = ParsePutDeviceManyBody(&r);
    if (b.ok() && ParsePutDeviceManyBody(&r).ok()) __builtin_trap();  // nothing left to read
    BodyReader again(data, size);
    std::vector<Status> items;
    (void)ParsePutDeviceManyReply(&again, size % 8, &items);
  }
  {
    BodyReader r(data, size);
    EntryInfo e;
    if (ReadInfo(&r, &e)) {
      BodyWriter w;
      WriteInfo(&w, e);
    }
  }
  {
    BodyReader r(data, size);
    TensorMeta m;
    if (r.Meta(&m)) (void)m.ByteSize();
  }
  return 0;
}
