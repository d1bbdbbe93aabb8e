// Device puts, the server's half: a same-host client's CUDA memory (PUT_DEVICE, net/device_put.h),
// copied into the store by the server itself.
//
// Through a put arena (net/put_arena.h) a saved encoder output crosses host memory twice:
// the client's device->host copy into the arena, then the server's CPU copy into its pool.
// However the two are overlapped, the entry is readable at well under half the speed of the
// one device->host copy. PUT_DEVICE sends the tensor's CUDA IPC handle instead. The server
// opens the allocation (once per connection: opening a handle costs about as much as
// copying tens of MB), then copies with the GPU's copy engine,
// on a stream of the connection's own, straight into a pool reservation -- device->host into
// the host pool, which it registers with CUDA once (PREPARE_DEVICE_PUTS, or the first
// PUT_DEVICE) -- or device->device into its device tier, where it has one on that GPU. One
// copy; the entry is readable when it lands.
//
//   // the client: the tensor written (its stream synchronized), not freed until this returns
//   EC_RETURN_IF_ERROR(client->PutFromDevice("qwen", mm_hash, meta, tensor_ptr, bytes));
//
// The stored bytes are the server's copy: the pool stays sealed against clients. Each
// mapping is keyed by the handle and the allocation's buffer id (never reused within the
// client process), so a block the client freed and allocated again is opened afresh, never
// read through a stale mapping; a connection keeps at most kMaxImports open, and closes them
// when it ends. A server offers kFeaturePutDevice only where it sees a GPU.
//
// A mapping kept open pins the client's memory: CUDA leaves an allocation the client frees
// (PyTorch's empty_cache() returns whole segments) allocated until every process that opened
// it has closed it, and calls freeing it first undefined. So a mapping is closed once it has
// gone unused for kIdleClose -- at the connection's next request, or by its thread while it
// waits for one (Server::Serve) -- and memory a client frees comes back within about
// kIdleClose plus that wait, not when the connection ends
// (DevicePut.AClientsFreedMemoryComesBackOnceTheServerLeavesItIdle).
//
// Thread rules: DevicePuts is shared by the server's connection threads (Prepare runs once,
// under its mutex). A DeviceImports belongs to one connection's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/memory_backend.h"
#include "base/mutex.h"
#include "base/status.h"
#include "cuda/cuda.h"
#include "net/device_put.h"
#include "net/protocol.h"
#include "store/store.h"

namespace ecstore::net {

// Server-wide: the store, and its host pool's CUDA registration once made.
class DevicePuts {
 public:
  explicit DevicePuts(Store* store) : store_(store) {}
  ~DevicePuts();
  DevicePuts(const DevicePuts&) = delete;
  DevicePuts& operator=(const DevicePuts&) = delete;
  // Whether this process sees a GPU (decided once): HELLO_OK then offers kFeaturePutDevice.
  bool Offered();
  // Registers the host pool with CUDA, once (a store with a device tier has done so). A
  // failure is returned each time: device->host copies into unregistered memory would run at
  // pageable speed, so PUT_DEVICE refuses them and the client puts through its arena.
  Status Prepare();
  Store* store() const { return store_; }

 private:
  Store* const store_;
  Mutex mu_;
  int offered_ GUARDED_BY(mu_) = -1;  // unknown until Offered()
  bool prepared_ GUARDED_BY(mu_) = false;
  Status prepare_error_ GUARDED_BY(mu_);
  std::unique_ptr<MemoryRegistrar> registrar_ GUARDED_BY(mu_);
};

// Per connection: the client allocations opened here, and the stream its copies run on.
class DeviceImports {
 public:
  static constexpr size_t kMaxImports = kMaxDeviceImports;
  // Reopening is costly; an engine saving items step after step keeps its mappings open.
  static constexpr std::chrono::milliseconds kIdleClose{1000};
  DeviceImports() = default;
  ~DeviceImports();
  DeviceImports(const DeviceImports&) = delete;
  DeviceImports& operator=(const DeviceImports&) = delete;
  // [offset, offset + size) of the client's allocation, opened here (once per handle and
  // buffer id) on `device`; InvalidArgument if it lies outside the allocation.
  Result<const uint8_t*> Open(const std::string& handle, uint64_t buffer_id, int device,
                              uint64_t offset, uint64_t size);
  // Whether Open(handle, buffer_id, ...) would close another mapping to make room (a batch
  // first waits for the copies it has enqueued from those).
  bool WouldEvict(const std::string& handle, uint64_t buffer_id) const;
  Result<cuda::CopyStream*> Stream(int device);
  // This process's ordinal of the GPU at `bus_id` (the last answer kept).
  Result<int> Device(const std::string& bus_id);
  // Closes the mappings unused since now - kIdleClose (Server::Serve, before each request
  // and while it waits for one).
  void CloseIdle(std::chrono::steady_clock::time_point now);

 private:
  struct Import {
    std::string handle;
    uint64_t buffer_id;
    uint8_t* base;
    size_t bytes;
    std::chrono::steady_clock::time_point used;
  };
  std::vector<Import> open_;  // the most recently used last
  std::unique_ptr<cuda::CopyStream> stream_;
  std::string bus_id_;  // Device's last answer
  int device_ = -1;
};

// Server: answers PREPARE_DEVICE_PUTS, PUT_DEVICE or PUT_DEVICE_MANY (*imports made on first
// use). A malformed
// body is the outer status: answer it, then close the connection. *key and *bytes_in are set
// for the log.
Result<Answer> AnswerDevicePut(DevicePuts* puts, std::unique_ptr<DeviceImports>* imports, Op op,
                               BodyReader* r, std::string* ns, std::string* key,
                               uint64_t* bytes_in);

}  // namespace ecstore::net
