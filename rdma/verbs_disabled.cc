// The verbs transport in a build without RDMA (-DEC_WITH_RDMA=OFF): no libibverbs or
// librdmacm is linked, no device is ever found, and asking for verbs says how the library
// was built. TCP and shared memory are unaffected.
#include "rdma/verbs.h"

namespace ecstore::rdma {

using net::HostPort;
namespace {
Status NotBuilt() {
  return Status::Unavailable(
      "this ec-store was built without RDMA verbs (-DEC_WITH_RDMA=OFF); use TCP or shared "
      "memory, or rebuild with -DEC_WITH_RDMA=ON");
}
}  // namespace

Result<std::unique_ptr<RdmaListener>> RdmaListener::Start(const HostPort&) { return NotBuilt(); }
RdmaListener::~RdmaListener() = default;
Status RdmaListener::Register(const MemoryRegion&) { return NotBuilt(); }
void RdmaListener::Deregister(const MemoryRegion&) {}
uint32_t RdmaListener::rkey() const { return 0; }
Status RdmaListener::RegisterDevice(const MemoryRegion&, int) { return NotBuilt(); }
void RdmaListener::DeregisterDevice() {}
uint32_t RdmaListener::device_rkey() const { return 0; }
void RdmaListener::EventLoop() {}

Result<std::unique_ptr<RdmaConnection>> RdmaConnection::Connect(const HostPort&, size_t,
                                                                std::chrono::milliseconds,
                                                                std::shared_ptr<ReadCounters>) {
  return NotBuilt();
}
RdmaConnection::~RdmaConnection() = default;
Status RdmaConnection::ReadMany(const std::vector<RemoteRead>&) { return NotBuilt(); }
Status RdmaConnection::RegisterBuffer(std::span<uint8_t>, bool, int) { return NotBuilt(); }
void RdmaConnection::UnregisterBuffer(std::span<uint8_t>) {}

bool RdmaDevicePresent() { return false; }

}  // namespace ecstore::rdma
