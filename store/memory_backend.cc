#include "store/memory_backend.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>

namespace ecstore {
namespace {

constexpr size_t kHugePage = 2u << 20;

class HostPinnedBackend : public MemoryBackend {
 public:
  const char* Name() const override { return "host-pinned"; }
  MemoryCapabilities Capabilities() const override { return {true, false, false}; }

  Result<MemoryRegion> Map(size_t bytes) override {
    MemoryRegion r;
    r.size = bytes;
    void* p = MAP_FAILED;
    if (bytes % kHugePage == 0) {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
      r.huge_pages = p != MAP_FAILED;
    }
    if (p == MAP_FAILED) {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap pool");
      madvise(p, bytes, MADV_HUGEPAGE);
    }
    r.base = static_cast<uint8_t*>(p);
    // Pinning faults every page in now, so the data path never takes a page fault.
    r.locked = mlock(p, bytes) == 0;
    if (!r.locked) {
      // Touch pages anyway so first-use latency is not on the data path.
      for (size_t off = 0; off < bytes; off += 4096) r.base[off] = 0;
    }
    return r;
  }

  void Unmap(const MemoryRegion& r) override {
    if (!r.base) return;
    if (r.locked) munlock(r.base, r.size);
    munmap(r.base, r.size);
  }
};

class SharedHostBackend : public MemoryBackend {
 public:
  const char* Name() const override { return "host-pinned-shared"; }
  MemoryCapabilities Capabilities() const override { return {true, false, true}; }

  Result<MemoryRegion> Map(size_t bytes) override {
    MemoryRegion r;
    r.size = bytes;
    int fd = memfd_create("ec-store-pool", MFD_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "memfd_create for the shared pool");
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      int e = errno;
      close(fd);
      return Status::FromErrno(e, "size the shared pool");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return Status::FromErrno(e, "mmap the shared pool");
    }
    madvise(p, bytes, MADV_HUGEPAGE);
    r.base = static_cast<uint8_t*>(p);
    r.locked = mlock(p, bytes) == 0;
    r.shm_fd = fd;
    return r;
  }

  void Unmap(const MemoryRegion& r) override {
    if (!r.base) return;
    if (r.locked) munlock(r.base, r.size);
    munmap(r.base, r.size);
    if (r.shm_fd >= 0) close(r.shm_fd);
  }
};

}  // namespace

std::unique_ptr<MemoryBackend> NewSharedHostBackend() {
  return std::make_unique<SharedHostBackend>();
}

std::unique_ptr<MemoryBackend> NewHostPinnedBackend() {
  return std::make_unique<HostPinnedBackend>();
}

}  // namespace ecstore
