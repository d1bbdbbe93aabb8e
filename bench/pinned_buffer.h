// The bench's HostBuffer (base/host_buffer.h: memory mapped as the store's pool is, pinned,
// huge pages where there are any, faulted in): where its disk limits read into and write
// from, and where the store's gets land in the `ec-store-hostbuf` row. The kind of memory
// matters to O_DIRECT on a virtio disk: every 4 KiB page is one segment of a virtio request
// (254 at most), so 1 MiB reads into 4 KiB pages run far below reads into huge pages
// (docs/benchmarks.md has fio's figures for both). A limit that reads into 4 KiB pages while
// the store reads into its pool measures the memory, not the disk.
// Thread rules: owned by one thread at a time; the bytes may be shared as any memory.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "base/host_buffer.h"

namespace ecstore::bench {

class PinnedBuffer : public HostBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) : HostBuffer(Make(bytes)) {}

 private:
  static HostBuffer Make(size_t bytes) {
    auto b = HostBuffer::Allocate(bytes);
    if (!b.ok()) {
      std::fprintf(stderr, "\nbench: map %zu bytes of pinned memory: %s\n", bytes,
                   b.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(b).value();  // faulted in by the backend's Map, not during a measurement
  }
};

}  // namespace ecstore::bench
