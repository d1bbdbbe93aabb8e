// HostBuffer: memory for a reader's destination, mapped as the store's pool is
// (NewHostPinnedBackend: pinned, huge pages where the kernel has free ones, else
// MADV_HUGEPAGE) and faulted in when it is made, so neither a read nor a copy into it takes
// a page fault. Where a get reads O_DIRECT straight into the caller's memory
// (Options::promote_on_get = false), the kind of memory sets the speed on virtual disks: a
// virtio request holds at most 254 segments, one per page, so a read into 4 KiB pages is
// split into many more requests than one into huge pages (see docs/limits.md).
//
//   auto buf = HostBuffer::Allocate(60 << 20);               // once, reused for every get
//   store->Get(ns, key, buf->span(0, buf->size()));
//
// Thread rules: owned by one thread at a time (move-only); its bytes may be shared as any
// memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "base/memory_backend.h"
#include "base/status.h"

namespace ecstore {

class HostBuffer {
 public:
  // InvalidArgument for 0 bytes; the backend's error (with what to do) if it cannot map.
  static Result<HostBuffer> Allocate(size_t bytes);
  HostBuffer() = default;
  HostBuffer(HostBuffer&& o) noexcept;
  HostBuffer& operator=(HostBuffer&& o) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  uint8_t* data() const { return region_.base; }
  size_t size() const { return size_; }
  std::span<uint8_t> span(size_t at, size_t n) const { return {region_.base + at, n}; }
  bool huge_pages() const { return region_.huge_pages; }
  bool pinned() const { return region_.locked; }

 private:
  void Release();
  std::unique_ptr<MemoryBackend> backend_;
  MemoryRegion region_;
  size_t size_ = 0;
};

}  // namespace ecstore
