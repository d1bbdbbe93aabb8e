// ecstore::cuda in a build without the CUDA toolkit: every call says so.
#include "cuda/cuda.h"
#include "cuda/events.h"
#include "cuda/peer.h"

namespace ecstore::cuda {
namespace {
Status NotBuilt() {
  return Status::Unavailable(
      "ec-store was built without CUDA (configure with -DEC_WITH_CUDA=ON where the CUDA "
      "toolkit is installed)");
}
}  // namespace

bool Built() { return false; }
int DeviceCount(std::string* why) {
  if (why) *why = NotBuilt().message();
  return 0;
}
bool IsDevicePointer(const void*, int*) { return false; }
std::unique_ptr<MemoryBackend> NewDeviceBackend(int) { return nullptr; }
std::unique_ptr<MemoryRegistrar> NewHostRegistrar() { return nullptr; }
Result<std::unique_ptr<CopyStream>> CopyStream::Create(int) { return NotBuilt(); }
Status CopyOnStream(void*, const void*, size_t, Direction, int, uintptr_t) { return NotBuilt(); }
Status EnqueueCopy(void*, const void*, size_t, Direction, int, uintptr_t) { return NotBuilt(); }
Status WaitForStream(int, uintptr_t) { return NotBuilt(); }
Status EnqueueCopies(const std::vector<CopyOp>&, int, uintptr_t) { return NotBuilt(); }
void SetCopyBatching(bool) {}
Status EnqueuePeerCopy(void*, int, const void*, int, size_t, int, uintptr_t) { return NotBuilt(); }
PeerTopology& CudaTopology() {
  struct NoPeers : PeerTopology {
    bool CanAccessPeer(int, int) override { return false; }
    Status EnablePeerAccess(int, int) override { return NotBuilt(); }
  };
  static NoPeers none;
  return none;
}
Result<uintptr_t> RecordEvent(int, uintptr_t) { return NotBuilt(); }
Status WaitEvent(int, uintptr_t) { return NotBuilt(); }
Result<int> DmaBufFd(const void*, size_t) { return NotBuilt(); }
Result<std::string> ExportIpcHandle(const void*) { return NotBuilt(); }
Result<void*> OpenIpcHandle(const std::string&, int) { return NotBuilt(); }
void CloseIpcHandle(void*) {}
Result<DeviceAllocation> AllocationOf(const void*) { return NotBuilt(); }
Result<int> DeviceByBusId(const std::string&) { return NotBuilt(); }

}  // namespace ecstore::cuda
