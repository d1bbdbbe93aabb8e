// ecstore::cuda over the CUDA runtime API.
#include "cuda/cuda.h"

#include <cuda.h>  // driver API types only: the one driver call goes through an entry point
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "base/mutex.h"
#include "cuda/events.h"
#include "cuda/peer.h"

namespace ecstore::cuda {
namespace {

Status Fail(cudaError_t err, const std::string& what) {
  return Status::IOError(what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                         ")");
}

// A driver API function, through the runtime's entry point (nothing links libcuda); null
// where this driver lacks it.
template <typename Fn>
Fn DriverEntry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// Sets the calling thread's device for the scope of a call.
class DeviceScope {
 public:
  // make_current: set it even where it is the thread's device already, which makes its
  // primary context current on a thread that has none yet.
  explicit DeviceScope(int device, bool make_current = false) : device_(device) {
    if (cudaGetDevice(&old_) != cudaSuccess) old_ = -1;
    if (make_current || old_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (old_ >= 0 && old_ != device_) cudaSetDevice(old_);
  }

 private:
  int device_;
  int old_ = -1;
};

class DeviceBackend : public MemoryBackend {
 public:
  explicit DeviceBackend(int device) : device_(device) {}
  const char* Name() const override { return "cuda-device"; }
  MemoryCapabilities Capabilities() const override {
    MemoryCapabilities c;
    c.host_visible = false;
    c.device_memory = true;
    return c;
  }
  Result<MemoryRegion> Map(size_t bytes) override {
    DeviceScope scope(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess)
      return Fail(err, "allocating a device pool of " + std::to_string(bytes) + " bytes on GPU " +
                           std::to_string(device_) + "; lower Options::device_pool_bytes");
    MemoryRegion r;
    r.base = static_cast<uint8_t*>(p);
    r.size = bytes;
    r.locked = true;  // device memory is never paged out
    return r;
  }
  void Unmap(const MemoryRegion& region) override {
    if (!region.base) return;
    DeviceScope scope(device_);
    cudaFree(region.base);
  }

 private:
  int device_;
};

class HostRegistrar : public MemoryRegistrar {
 public:
  const char* Name() const override { return "CUDA (cudaHostRegister)"; }
  Status Register(const MemoryRegion& region) override {
    cudaError_t err = cudaHostRegister(region.base, region.size, cudaHostRegisterPortable);
    if (err == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      return Status::Ok();
    }
    if (err != cudaSuccess) return Fail(err, "cudaHostRegister");
    return Status::Ok();
  }
  void Deregister(const MemoryRegion& region) override {
    if (cudaHostUnregister(region.base) != cudaSuccess) cudaGetLastError();
  }
};

class StreamImpl : public CopyStream {
 public:
  StreamImpl(int device, cudaStream_t s) : device_(device), stream_(s) {}
  ~StreamImpl() override {
    DeviceScope scope(device_);
    cudaStreamDestroy(stream_);
  }
  // The stream is this object's alone: waiting on it waits for this copy and nothing else
  // (an event record + wait costs a few microseconds more per copy).
  Status Copy(void* dst, const void* src, size_t bytes, Direction d) override {
    return CopyOnStream(dst, src, bytes, d, device_, reinterpret_cast<uintptr_t>(stream_));
  }
  int device() const override { return device_; }
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(stream_); }

 private:
  int device_;
  cudaStream_t stream_;
};

}  // namespace

Status CopyOnStream(void* dst, const void* src, size_t bytes, Direction d, int device,
                    uintptr_t stream) {
  EC_RETURN_IF_ERROR(EnqueueCopy(dst, src, bytes, d, device, stream));
  return WaitForStream(device, stream);
}

Status EnqueueCopy(void* dst, const void* src, size_t bytes, Direction d, int device,
                   uintptr_t stream) {
  DeviceScope scope(device);
  cudaMemcpyKind kind = d == Direction::kHostToDevice   ? cudaMemcpyHostToDevice
                        : d == Direction::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                        : cudaMemcpyDeviceToDevice;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, kind, reinterpret_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return Fail(err, "copying " + std::to_string(bytes) + " bytes");
  return Status::Ok();
}

Status WaitForStream(int device, uintptr_t stream) {
  DeviceScope scope(device);
  cudaError_t err = cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return Fail(err, "waiting for the copies");
  return Status::Ok();
}

namespace {
// Off for good once the driver refuses batches.
std::atomic<bool>& Batches() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("EC_STORE_COPY_BATCH");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return on;
}
}  // namespace

void SetCopyBatching(bool on) { Batches() = on; }

Status EnqueueCopies(const std::vector<CopyOp>& copies, int device, uintptr_t stream) {
  if (copies.empty()) return Status::Ok();
  DeviceScope scope(device);
  auto s = reinterpret_cast<cudaStream_t>(stream);
  std::atomic<bool>& batches = Batches();
  // Not on the legacy stream (0), which batches may not use.
  if (copies.size() > 1 && stream != 0 && batches.load(std::memory_order_relaxed)) {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (const CopyOp& c : copies)
      dsts.push_back(c.dst), srcs.push_back(c.src), sizes.push_back(c.bytes);
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // after the work queued before
    size_t first = 0;
    cudaError_t err = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), copies.size(),
                                           &attr, &first, 1, s);
    if (err == cudaSuccess) return Status::Ok();
    cudaGetLastError();
    if (err == cudaErrorNotSupported || err == cudaErrorCallRequiresNewerDriver) {
      batches = false;
      spdlog::info("cudaMemcpyBatchAsync: {}; copies go one call each", cudaGetErrorString(err));
    }
    // Otherwise one at a time below, which names the copy that fails.
  }
  for (const CopyOp& c : copies) {
    cudaError_t err = cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, s);
    if (err != cudaSuccess) return Fail(err, "copying " + std::to_string(c.bytes) + " bytes");
  }
  return Status::Ok();
}

Status EnqueuePeerCopy(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                       int stream_device, uintptr_t stream) {
  DeviceScope scope(stream_device);
  cudaError_t err = cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes,
                                        reinterpret_cast<cudaStream_t>(stream));
  if (err != cudaSuccess)
    return Fail(err, "copying " + std::to_string(bytes) + " bytes from GPU " +
                         std::to_string(src_device) + " to GPU " + std::to_string(dst_device));
  return Status::Ok();
}

namespace {
class Topology : public PeerTopology {
 public:
  bool CanAccessPeer(int device, int peer) override {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return can != 0;
  }
  Status EnablePeerAccess(int device, int peer) override {
    DeviceScope scope(device);
    cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return Status::Ok();
    }
    if (err != cudaSuccess) return Fail(err, "cudaDeviceEnablePeerAccess");
    return Status::Ok();
  }
};
}  // namespace

PeerTopology& CudaTopology() {
  static Topology t;
  return t;
}

Result<uintptr_t> RecordEvent(int device, uintptr_t stream) {
  DeviceScope scope(device);
  cudaEvent_t e;
  cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (err != cudaSuccess) return Fail(err, "creating an event");
  err = cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    cudaEventDestroy(e);
    return Fail(err, "recording an event");
  }
  return reinterpret_cast<uintptr_t>(e);
}

Status WaitEvent(int device, uintptr_t event) {
  DeviceScope scope(device);
  cudaEvent_t e = reinterpret_cast<cudaEvent_t>(event);
  cudaError_t err = cudaEventSynchronize(e);
  cudaEventDestroy(e);
  if (err != cudaSuccess) return Fail(err, "waiting for a copy");
  return Status::Ok();
}

bool Built() { return true; }

int DeviceCount(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no usable GPU: ") + cudaGetErrorString(err);
    return 0;
  }
  if (n == 0 && why) *why = "no GPU visible (cudaGetDeviceCount is 0)";
  return n;
}

bool IsDevicePointer(const void* p, int* device) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (device) *device = a.device;
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::unique_ptr<MemoryBackend> NewDeviceBackend(int device) {
  return std::make_unique<DeviceBackend>(device);
}

std::unique_ptr<MemoryRegistrar> NewHostRegistrar() { return std::make_unique<HostRegistrar>(); }

Result<std::unique_ptr<CopyStream>> CopyStream::Create(int device) {
  DeviceScope scope(device);
  cudaStream_t s = nullptr;
  // Non-blocking: no implicit ordering with the legacy default stream that engines use.
  // Waiting on it spins as cudaStreamSynchronize does; a blocking-sync waiter wakes tens of
  // microseconds late, longer than a large device-to-device copy takes.
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess)
    return Fail(err, "creating a copy stream on GPU " + std::to_string(device));
  return std::unique_ptr<CopyStream>(new StreamImpl(device, s));
}

Result<int> DmaBufFd(const void* base, size_t bytes) {
  using Fn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  auto fn = DriverEntry<Fn>("cuMemGetHandleForAddressRange");
  if (!fn)
    return Status::Unavailable(
        "this CUDA driver cannot export dma-bufs "
        "(cuMemGetHandleForAddressRange not found)");
  int fd = -1;
  CUresult r =
      fn(&fd, reinterpret_cast<CUdeviceptr>(base), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS || fd < 0)
    return Status::Unavailable("the GPU cannot export its memory as a dma-buf (CUresult " +
                               std::to_string(static_cast<int>(r)) + ")");
  return fd;
}

Result<DeviceAllocation> AllocationOf(const void* p) {
  int device = -1;
  if (!IsDevicePointer(p, &device))
    return Status::InvalidArgument("not device memory of this process");
  using RangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  using AttrFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  auto range = DriverEntry<RangeFn>("cuMemGetAddressRange");
  auto attr = DriverEntry<AttrFn>("cuPointerGetAttribute");
  if (!range || !attr)
    return Status::Unavailable("this CUDA driver lacks cuMemGetAddressRange/cuPointerGetAttribute");
  // The driver calls need the device's context current on this thread, which a thread that
  // has made no runtime call yet lacks (a saver's worker thread, say): cudaSetDevice makes
  // it current (CUDA 12 and later), without the device-wide wait a cudaFree would cost.
  DeviceScope scope(device, /*make_current=*/true);
  DeviceAllocation a;
  CUdeviceptr base = 0;
  unsigned long long id = 0;
  const auto at = reinterpret_cast<CUdeviceptr>(p);
  if (range(&base, &a.bytes, at) != CUDA_SUCCESS ||
      attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, at) != CUDA_SUCCESS)
    return Status::InvalidArgument("the allocation holding this device pointer is unknown");
  a.base = reinterpret_cast<const uint8_t*>(base);
  a.buffer_id = id;
  a.device = device;
  // Each device's bus id, asked once (it is asked for every put).
  static Mutex mu;
  static std::map<int, std::string> bus_ids;
  MutexLock l(&mu);
  auto& bus_id = bus_ids[device];
  if (bus_id.empty()) {
    char bus[32] = {};
    cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
    if (err != cudaSuccess) return Fail(err, "cudaDeviceGetPCIBusId");
    bus_id = bus;
  }
  a.bus_id = bus_id;
  return a;
}

Result<int> DeviceByBusId(const std::string& bus_id) {
  int device = -1;
  cudaError_t err = cudaDeviceGetByPCIBusId(&device, bus_id.c_str());
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::NotFound("no GPU at PCI bus id '" + bus_id + "' is visible to this process");
  }
  return device;
}

Result<std::string> ExportIpcHandle(const void* device_base) {
  cudaIpcMemHandle_t h;
  cudaError_t err = cudaIpcGetMemHandle(&h, const_cast<void*>(device_base));
  if (err != cudaSuccess) return Fail(err, "cudaIpcGetMemHandle");
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

Result<void*> OpenIpcHandle(const std::string& handle, int device) {
  if (handle.size() != sizeof(cudaIpcMemHandle_t))
    return Status::InvalidArgument("a CUDA IPC handle has " +
                                   std::to_string(sizeof(cudaIpcMemHandle_t)) + " bytes, not " +
                                   std::to_string(handle.size()));
  DeviceScope scope(device);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return Fail(err, "cudaIpcOpenMemHandle");
  return p;
}

void CloseIpcHandle(void* p) {
  if (p && cudaIpcCloseMemHandle(p) != cudaSuccess) cudaGetLastError();
}

}  // namespace ecstore::cuda
