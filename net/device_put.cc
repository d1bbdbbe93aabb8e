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

}  // namespace ecstore::net
