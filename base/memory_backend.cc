#include "base/memory_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

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

// Readers get the pool's bytes and nothing else. The size is sealed (a reader's ftruncate
// would SIGBUS the server on its next write), and F_SEAL_FUTURE_WRITE refuses every later
// writable mapping or write(2) -- also through a reopen of /proc/PID/fd -- while the mapping
// the server made above stays writable. The descriptor handed out is a read-only reopen of
// the memfd; the read-write one is closed (the mapping keeps the memory alive).
Result<int> SealForReaders(int fd) {
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
  if (fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    int e = errno;
    close(fd);
    return Status::FromErrno(e, "seal the shared pool (needs Linux 5.1+ for F_SEAL_FUTURE_WRITE)");
  }
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  int ro = open(self.c_str(), O_RDONLY | O_CLOEXEC);
  if (ro < 0) return fd;  // no /proc: the seals alone keep readers out
  close(fd);
  return ro;
}

class SharedHostBackend : public MemoryBackend {
 public:
  const char* Name() const override { return "host-pinned-shared"; }
  MemoryCapabilities Capabilities() const override { return {true, false, true}; }

  Result<MemoryRegion> Map(size_t bytes) override {
    MemoryRegion r;
    r.size = bytes;
    int fd = memfd_create("ec-store-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
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
    auto reader_fd = SealForReaders(fd);
    if (!reader_fd.ok()) {
      if (r.locked) munlock(p, bytes);
      munmap(p, bytes);
      return reader_fd.status();
    }
    r.shm_fd = *reader_fd;
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
