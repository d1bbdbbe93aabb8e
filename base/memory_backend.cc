#include "base/memory_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1
#endif

namespace ecstore {

namespace {
constexpr size_t kHugePage = 2u << 20;
}  // namespace

void PrefaultParallel(uint8_t* p, size_t bytes, unsigned max_threads, MemoryRegion* r,
                      bool collapse) {
  constexpr size_t kPage = 4096, kMinSlice = 64u << 20;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t threads = std::clamp<size_t>(std::min<size_t>(max_threads, bytes / kMinSlice), 1,
                                            std::max(1u, max_threads));
  const size_t unit = collapse ? kHugePage : kPage;  // slices whole huge pages when collapsing
  const size_t slice = (bytes / threads + unit - 1) / unit * unit;
  auto populate = [&](size_t from) {
    const size_t len = std::min(slice, bytes - from);
    if (collapse) {
      // One page touched per huge page is enough for the collapse to take (it fills the
      // rest), and cheaper than faulting in all 512 first: the collapse copies them.
      for (size_t off = 0; off < len; off += kHugePage) p[from + off] = 0;
      madvise(p + from, len, MADV_COLLAPSE);  // refused: populated in 4 KiB pages below
    }
    if (madvise(p + from, len, MADV_POPULATE_WRITE) == 0) return;
    for (size_t off = 0; off < len; off += kPage) p[from + off] = 0;  // older kernels
  };
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads && i * slice < bytes; ++i) pool.emplace_back(populate, i * slice);
  populate(0);
  for (auto& t : pool) t.join();
  r->prefault_threads = static_cast<unsigned>(pool.size() + 1);
  r->prefault_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void* MapSharedAligned(int fd, size_t bytes, int prot) {
  void* span = mmap(nullptr, bytes + kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (span == MAP_FAILED) return mmap(nullptr, bytes, prot, MAP_SHARED, fd, 0);
  // The aligned address inside the span; the slack on either side is given back.
  auto* lo = static_cast<uint8_t*>(span);
  auto* at = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(lo) + kHugePage - 1) &
                                        ~uintptr_t{kHugePage - 1});
  void* p = mmap(at, bytes, prot, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    munmap(span, bytes + kHugePage);
    errno = e;
    return MAP_FAILED;
  }
  if (at > lo) munmap(lo, static_cast<size_t>(at - lo));
  uint8_t* const end = lo + bytes + kHugePage;
  if (at + bytes < end) munmap(at + bytes, static_cast<size_t>(end - (at + bytes)));
  return p;
}

size_t HugePageBytes(const void* p, size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  bool inside = false;  // the fields that follow belong to a mapping overlapping [lo, hi)
  size_t huge = 0;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t start, end;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2 &&
        line.find(':') > line.find(' ')) {  // a mapping's header, not a "Field: value" line
      inside = start < hi && end > lo;
      continue;
    }
    unsigned long long kb;
    char field[64];
    if (!inside || std::sscanf(line.c_str(), "%63[^:]: %llu kB", field, &kb) != 2) continue;
    const std::string f(field);
    if (f == "AnonHugePages" || f == "ShmemPmdMapped" || f == "FilePmdMapped" ||
        f == "Shared_Hugetlb" || f == "Private_Hugetlb")
      huge += static_cast<size_t>(kb) << 10;
  }
  return std::min(huge, bytes);
}

namespace {

// What the kernel granted, after the fault-in: a MADV_HUGEPAGE is only a request.
void NoteHugePages(MemoryRegion* r) {
  r->huge_page_bytes = r->hugetlb ? r->size : HugePageBytes(r->base, r->size);
  r->huge_pages = r->size > 0 && r->huge_page_bytes == r->size;
}

unsigned PrefaultThreads() {
  return std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
}

class HostPinnedBackend : public MemoryBackend {
 public:
  const char* Name() const override { return "host-pinned"; }
  MemoryCapabilities Capabilities() const override { return {true, false, false}; }

  Result<MemoryRegion> Map(size_t bytes) override {
    MemoryRegion r;
    r.size = bytes;
    // Huge pages where the kernel has them reserved (faulted in by the mapping itself);
    // otherwise 4 KiB pages, transparent huge pages asked for, faulted in in parallel.
    void* p = bytes % kHugePage == 0
                  ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0)
                  : MAP_FAILED;
    r.hugetlb = p != MAP_FAILED;
    if (!r.hugetlb) {
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap pool");
      madvise(p, bytes, MADV_HUGEPAGE);
      PrefaultParallel(static_cast<uint8_t*>(p), bytes, PrefaultThreads(), &r);
    }
    r.base = static_cast<uint8_t*>(p);
    r.locked = mlock(p, bytes) == 0;  // the pages are in already: pinning them is quick
    NoteHugePages(&r);
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

// A shared memory file of `bytes` (*fd), mapped writable at a 2 MiB-aligned address (a huge
// page is mapped whole only there), transparent huge pages asked for.
Result<void*> MapShmem(size_t bytes, int* fd) {
  *fd = memfd_create("ec-store-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (*fd < 0) return Status::FromErrno(errno, "memfd_create for the shared pool");
  if (ftruncate(*fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(*fd);
    return Status::FromErrno(e, "size the shared pool");
  }
  void* p = MapSharedAligned(*fd, bytes, PROT_READ | PROT_WRITE);
  if (p == MAP_FAILED) {
    int e = errno;
    close(*fd);
    return Status::FromErrno(e, "mmap the shared pool");
  }
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

class SharedHostBackend : public MemoryBackend {
 public:
  const char* Name() const override { return "host-pinned-shared"; }
  MemoryCapabilities Capabilities() const override { return {true, false, true}; }

  Result<MemoryRegion> Map(size_t bytes) override {
    MemoryRegion r;
    r.size = bytes;
    // Huge pages where the kernel has them reserved (vm.nr_hugepages), as the private pool:
    // a hugetlb memfd, its pages taken by the mapping. Otherwise shared memory, which the
    // kernel faults in in 4 KiB pages unless shmem_enabled allows more (it is "never" on
    // many distributions' defaults); MADV_COLLAPSE makes them huge pages anyway. Disk reads
    // land in this pool, and O_DIRECT into 4 KiB pages costs a request segment per page, so
    // a get from disk is measurably slower into them. The collapse costs time at open (about
    // twice what faulting in 4 KiB pages does), paid once per pool.
    int fd = -1;
    void* p = MAP_FAILED;
    if (bytes % kHugePage == 0) {
      fd = memfd_create("ec-store-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
      if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0)
        p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED && fd >= 0) close(fd);  // none reserved (or too few): shmem
    }
    r.hugetlb = p != MAP_FAILED;
    if (!r.hugetlb) {
      auto shm = MapShmem(bytes, &fd);
      if (!shm.ok()) return shm.status();
      p = *shm;
      PrefaultParallel(static_cast<uint8_t*>(p), bytes, PrefaultThreads(), &r, /*collapse=*/true);
    }
    r.base = static_cast<uint8_t*>(p);
    r.locked = mlock(p, bytes) == 0;
    NoteHugePages(&r);
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
