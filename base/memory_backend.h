// Memory backends own the one contiguous region a pool is carved from. The host backend maps
// pinned (mlocked) memory, with huge pages when the system has them; the CUDA device pool and
// the shared-memory (memfd) pool plug in here. Registrars (RDMA MR, cudaHostRegister) are
// called once, at Open, for the whole region — never per request.
// Thread rules: Map/Unmap from the owner (Store::Open / ~Store) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace ecstore {

struct MemoryCapabilities {
  bool host_visible = true;    // CPU can memcpy to/from it
  bool device_memory = false;  // lives on a GPU
  bool shareable = false;      // can be passed to another process (memfd)
};

struct MemoryRegion {
  uint8_t* base = nullptr;
  size_t size = 0;
  bool hugetlb = false;        // MAP_HUGETLB: reserved huge pages, faulted in by the mmap
  bool huge_pages = false;     // every page of it is a huge one (hugetlb or transparent)
  size_t huge_page_bytes = 0;  // how many of its bytes are (HugePageBytes, after the fault-in)
  bool locked = false;
  int shm_fd = -1;  // >= 0 when shareable
  // Every page is faulted in at Map (eagerly, so the data path never takes a page fault),
  // by this many threads in parallel, in this long (kernel page zeroing dominates).
  unsigned prefault_threads = 0;
  double prefault_seconds = 0;
};

// Faults in [p, p + bytes) for writing with up to `max_threads` threads, each populating a
// slice (MADV_POPULATE_WRITE, or a write per page on kernels before 5.14); records how in *r.
// A 4 GiB pool took 2-15 s to open under load when one thread (MAP_POPULATE, mlock) did it.
// With `collapse` (shared memory, p 2 MiB-aligned), each slice is first touched once per
// 2 MiB and made huge pages with MADV_COLLAPSE (Linux 6.1+), which the kernel does whatever
// shmem_enabled says short of "deny"; a slice it refuses is populated in 4 KiB pages.
void PrefaultParallel(uint8_t* p, size_t bytes, unsigned max_threads, MemoryRegion* r,
                      bool collapse = false);

// Maps `bytes` of the shared memory file `fd` (MAP_SHARED, `prot`) at a 2 MiB-aligned
// address, where the kernel can map a huge page of it whole (a reader's mapping of a pool
// made of huge pages takes them as it does); MAP_FAILED with errno as mmap's.
void* MapSharedAligned(int fd, size_t bytes, int prot);

// How many bytes of [p, p + bytes) the kernel backs with huge pages, hugetlb or transparent
// (AnonHugePages, ShmemPmdMapped, FilePmdMapped and *_Hugetlb of the mappings it overlaps in
// /proc/self/smaps, at most `bytes`); 0 where that file cannot be read. Asking for
// transparent huge pages (MADV_HUGEPAGE) does not say whether they were granted: a memfd
// pool gets none while /sys/kernel/mm/transparent_hugepage/shmem_enabled is "never".
size_t HugePageBytes(const void* p, size_t bytes);

class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  virtual const char* Name() const = 0;
  virtual MemoryCapabilities Capabilities() const = 0;
  virtual Result<MemoryRegion> Map(size_t bytes) = 0;
  virtual void Unmap(const MemoryRegion& region) = 0;
};

// Anonymous mmap + mlock; MAP_HUGETLB when the kernel has free huge pages, else
// MADV_HUGEPAGE. An mlock failure is reported by the region (locked=false), not fatal:
// unprivileged users have small RLIMIT_MEMLOCK.
std::unique_ptr<MemoryBackend> NewHostPinnedBackend();
// The same, backed by a memfd (MAP_SHARED) so the pool can be mapped by same-host readers:
// the region's shm_fd is passed to them once.
std::unique_ptr<MemoryBackend> NewSharedHostBackend();

// Registers the pool with a transport or device once (an RDMA memory region, CUDA host
// registration), through Store::AddRegistrar; Deregister runs at RemoveRegistrar or Close.
// Implemented by rdma::RdmaListener (the server's verbs transport).
class MemoryRegistrar {
 public:
  virtual ~MemoryRegistrar() = default;
  virtual const char* Name() const = 0;
  virtual Status Register(const MemoryRegion& region) = 0;
  virtual void Deregister(const MemoryRegion& region) = 0;
};

}  // namespace ecstore
