// The CUDA runtime pieces the store uses: the device pool's memory, CUDA registration of
// host memory, copies on a stream, and IPC handles. Runtime API only. Built when the
// toolkit is found (-DEC_WITH_CUDA=AUTO|ON|OFF, target ecstore::cuda); otherwise every
// call says so (Unavailable "built without CUDA"), and DeviceCount is 0.
// Copies from pinned (registered) host memory run several times faster than from pageable
// memory, and opening an IPC handle in another process costs far more than a copy of an
// entry. Hence: host memory is registered once, copies go through a
// stream of the store's own (the caller's thread waits for that stream, not the device), and IPC
// handles are opened once per pool.
// Thread rules: the free functions are thread-safe. A CopyStream is used by one thread at a
// time (its owner's, or under the owner's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/memory_backend.h"
#include "base/status.h"

namespace ecstore::cuda {

// Whether this build has CUDA at all.
bool Built();
// Visible devices; 0 with the reason in *why (no driver, no device, built without CUDA).
int DeviceCount(std::string* why = nullptr);
// Whether p is device memory (cudaPointerGetAttributes), and on which device.
bool IsDevicePointer(const void* p, int* device = nullptr);

// Device memory for a pool: one cudaMalloc of the whole size at Map. The region's memory is
// not host visible (Capabilities().host_visible is false).
std::unique_ptr<MemoryBackend> NewDeviceBackend(int device);
// Registers host regions with CUDA once (cudaHostRegister, portable), so copies between
// them and any device run at pinned speed; Deregister unregisters.
std::unique_ptr<MemoryRegistrar> NewHostRegistrar();

enum class Direction { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// One stream of its own on a device. Copy enqueues and waits for that stream alone (nothing
// else on the device is synchronized).
class CopyStream {
 public:
  static Result<std::unique_ptr<CopyStream>> Create(int device);
  virtual ~CopyStream() = default;
  virtual Status Copy(void* dst, const void* src, size_t bytes, Direction d) = 0;
  virtual int device() const = 0;
  // The stream as an integer, for EnqueueCopy and WaitForStream: several copies enqueued,
  // then one wait.
  virtual uintptr_t handle() const = 0;
};

// A copy enqueued on a stream the caller owns (a cudaStream_t as an integer: torch's
// current stream), which is then waited for -- ordered after the work already queued there,
// as the caller's own copy would be (memory a caching allocator hands out may still be read
// by it). One call, no events: what a load into a fresh tensor needs.
Status CopyOnStream(void* dst, const void* src, size_t bytes, Direction d, int device,
                    uintptr_t stream);
// The two halves of CopyOnStream: a copy enqueued on the caller's stream (no wait; the
// bytes at src must stay as they are until the stream has run it), and the wait for that
// stream.
Status EnqueueCopy(void* dst, const void* src, size_t bytes, Direction d, int device,
                   uintptr_t stream);
Status WaitForStream(int device, uintptr_t stream);
// Copies enqueued on the caller's stream together: one cudaMemcpyBatchAsync where the
// runtime and driver have it (one submission for a step's items), else one cudaMemcpyAsync
// each. Each copy's direction is told by its pointers (unified addressing). No wait.
struct CopyOp {
  void* dst;
  const void* src;
  size_t bytes;
};
Status EnqueueCopies(const std::vector<CopyOp>& copies, int device, uintptr_t stream);
// Turns the batched submission off (one cudaMemcpyAsync per copy) or on again, process-wide;
// on by default unless EC_STORE_COPY_BATCH=0. For a driver that mishandles batches, and to
// measure what batching gains.
void SetCopyBatching(bool on);
// A copy from src_device's memory into dst_device's on `stream` (stream_device's, either
// of the two): cudaMemcpyPeerAsync -- a direct peer copy once cuda/peer.h's PeerRoutes has
// enabled the pair's access.
Status EnqueuePeerCopy(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                       int stream_device, uintptr_t stream);

// GPUDirect RDMA: a dma-buf fd for device memory [base, base+bytes)
// (cuMemGetHandleForAddressRange, through the runtime's driver entry point: nothing links
// libcuda). The caller registers it with the NIC (ibv_reg_dmabuf_mr) and closes it.
// Unavailable where the driver or the GPU cannot export dma-bufs.
Result<int> DmaBufFd(const void* base, size_t bytes);

// IPC: the handle of a device allocation's base (64 bytes), opened once in another process.
Result<std::string> ExportIpcHandle(const void* device_base);
Result<void*> OpenIpcHandle(const std::string& handle, int device);
void CloseIpcHandle(void* p);

// The device allocation that holds `p` (cuMemGetAddressRange), its process-wide unique id
// (CU_POINTER_ATTRIBUTE_BUFFER_ID: never reused while the process lives, so a block freed
// and allocated again is told from the one before) and its GPU's PCI bus id (ordinals differ
// between processes under CUDA_VISIBLE_DEVICES). InvalidArgument for memory that is not
// device memory of this process.
struct DeviceAllocation {
  const uint8_t* base = nullptr;
  size_t bytes = 0;
  uint64_t buffer_id = 0;
  int device = -1;
  std::string bus_id;  // "0000:3B:00.0"
};
Result<DeviceAllocation> AllocationOf(const void* p);
// This process's ordinal of the GPU at `bus_id`; NotFound where it is not visible here.
Result<int> DeviceByBusId(const std::string& bus_id);

}  // namespace ecstore::cuda
