// Memory mapped as the store's pool is (NewHostPinnedBackend: pinned, huge pages where there
// are any), pre-faulted: where the bench's disk limits read into and write from. The kind of
// memory matters to O_DIRECT on this VM: every 4 KiB page is one segment of a virtio request
// (254 at most), and fio's 1 MiB x QD32 reads ran at 1.0-1.1 GB/s into its default buffers
// against 2.8 GB/s into huge pages (2026-11-23). A limit that reads into 4 KiB pages while the
// store reads into its pool measures the memory, not the disk.
// Thread rules: owned by one thread at a time; the bytes may be shared as any memory.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>

#include "base/memory_backend.h"

namespace ecstore::bench {

class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) : backend_(NewHostPinnedBackend()) {
    auto r = backend_->Map(bytes);
    if (!r.ok()) {
      std::fprintf(stderr, "\nbench: map %zu bytes of pinned memory: %s\n", bytes,
                   r.status().ToString().c_str());
      std::exit(1);
    }
    region_ = *r;
    size_ = bytes;
    std::memset(region_.base, 0, bytes);  // faulted in now, not during a measurement
  }
  ~PinnedBuffer() { backend_->Unmap(region_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* data() const { return region_.base; }
  size_t size() const { return size_; }
  std::span<uint8_t> span(size_t at, size_t n) const { return {region_.base + at, n}; }

 private:
  std::unique_ptr<MemoryBackend> backend_;
  MemoryRegion region_;
  size_t size_ = 0;
};

}  // namespace ecstore::bench
