#include "base/memory_backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "base/units.h"

namespace ecstore {
namespace {

// Transparent huge pages for anonymous memory: "always", "madvise" or "never".
std::string AnonThp() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  const size_t a = line.find('['), b = line.find(']');
  return a < b && b != std::string::npos ? line.substr(a + 1, b - a - 1) : "";
}

// Two halves of one mapping, one refused huge pages and one asking for them: each is counted
// apart (the kernel splits the mapping), and only what the kernel granted counts.
TEST(MemoryBackend, HugePageBytesCountsWhatTheKernelGrantedToThoseBytesOnly) {
  const size_t half = 32 * kMiB;
  auto* p = static_cast<uint8_t*>(
      mmap(nullptr, 2 * half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(madvise(p, half, MADV_NOHUGEPAGE), 0);
  madvise(p + half, half, MADV_HUGEPAGE);  // refused where THP is not built in: counted as 0
  MemoryRegion r;
  PrefaultParallel(p, 2 * half, 2, &r);
  EXPECT_EQ(HugePageBytes(p, half), 0u) << "MADV_NOHUGEPAGE: 4 KiB pages only";
  const size_t upper = HugePageBytes(p + half, half);
  EXPECT_LE(upper, half);
  EXPECT_EQ(HugePageBytes(p, 2 * half), upper);
  EXPECT_EQ(upper % (2 * kMiB), 0u) << "whole huge pages";
  const std::string thp = AnonThp();
  if (thp == "always" || thp == "madvise")
    EXPECT_GT(upper, 0u) << "transparent huge pages are '" << thp << "' here";
  else
    EXPECT_EQ(upper, 0u) << "transparent huge pages are '" << thp << "' here";
  munmap(p, 2 * half);
}

// A pool says what it got: huge_pages only when every byte is in huge pages, as counted.
TEST(MemoryBackend, APoolReportsTheHugePagesItWasGranted) {
  for (auto make : {NewHostPinnedBackend, NewSharedHostBackend}) {
    auto backend = make();
    auto r = backend->Map(64 * kMiB);
    ASSERT_TRUE(r.ok()) << backend->Name() << ": " << r.status().ToString();
    EXPECT_LE(r->huge_page_bytes, r->size) << backend->Name();
    EXPECT_EQ(r->huge_pages, r->huge_page_bytes == r->size) << backend->Name();
    if (!r->hugetlb) {  // transparent ones: the count taken at Map still holds (pinned)
      EXPECT_EQ(r->huge_page_bytes, HugePageBytes(r->base, r->size)) << backend->Name();
    }
    backend->Unmap(*r);
  }
}

// Huge pages reserved and free (/proc/meminfo's HugePages_Free x Hugepagesize), in bytes.
size_t FreeReservedHugePageBytes() {
  std::ifstream in("/proc/meminfo");
  size_t free_pages = 0, page_kib = 0;
  for (std::string key; in >> key;) {
    if (key == "HugePages_Free:") in >> free_pages;
    if (key == "Hugepagesize:") in >> page_kib;
  }
  return free_pages * page_kib * 1024;
}

// Readers of a shared pool get its bytes and nothing else: the descriptor handed out maps
// read-only, and neither it nor a reopen of it maps writable or shrinks the pool.
void ExpectReadOnlyForReaders(MemoryRegion& r) {
  for (size_t i = 0; i < r.size; i += 4096) r.base[i] = static_cast<uint8_t>(i >> 12);
  ASSERT_GE(r.shm_fd, 0);
  auto* ro = static_cast<uint8_t*>(mmap(nullptr, r.size, PROT_READ, MAP_SHARED, r.shm_fd, 0));
  ASSERT_NE(ro, MAP_FAILED);
  for (size_t i = 0; i < r.size; i += 4096)
    ASSERT_EQ(ro[i], static_cast<uint8_t>(i >> 12)) << "at " << i;
  munmap(ro, r.size);
  EXPECT_EQ(mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, r.shm_fd, 0), MAP_FAILED);
  EXPECT_NE(ftruncate(r.shm_fd, 0), 0);
  std::string self = "/proc/self/fd/" + std::to_string(r.shm_fd);
  int rw = open(self.c_str(), O_RDWR | O_CLOEXEC);
  if (rw >= 0) {
    EXPECT_EQ(mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0), MAP_FAILED)
        << "F_SEAL_FUTURE_WRITE: no writable mapping through a reopen either";
    close(rw);
  }
}

TEST(MemoryBackend, ASharedPoolIsReadOnlyForReaders) {
  auto backend = NewSharedHostBackend();
  auto r = backend->Map(64 * kMiB);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectReadOnlyForReaders(*r);
  backend->Unmap(*r);
}

// Whether this kernel can make shared memory huge pages where shmem_enabled does not allow
// them at fault: MADV_COLLAPSE (Linux 6.1) and shmem_enabled short of "deny".
std::string WhyNoShmemCollapse() {
  struct utsname u;
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2)
    return "the kernel's version is unknown";
  if (major < 6 || (major == 6 && minor < 1))
    return std::string("Linux ") + u.release + " has no MADV_COLLAPSE (6.1+)";
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  std::getline(in, line);
  if (line.empty()) return "no transparent huge pages for shared memory here";
  if (line.find("[deny]") != std::string::npos) return "shmem_enabled is 'deny'";
  return "";
}

// Without reserved huge pages a daemon's shared pool is made huge pages anyway (faulted in
// once per huge page, then MADV_COLLAPSE), whatever shmem_enabled says, and stays sealed for
// readers. A pool that is not a whole number of huge pages gets them for the whole ones.
TEST(MemoryBackend, ASharedPoolIsCollapsedIntoHugePagesWithoutReservedOnes) {
  if (const std::string why = WhyNoShmemCollapse(); !why.empty()) GTEST_SKIP() << why;
  const size_t bytes = 64 * kMiB;
  auto backend = NewSharedHostBackend();
  for (size_t size : {bytes, bytes + 4096}) {
    if (size == bytes && FreeReservedHugePageBytes() >= bytes) continue;  // hugetlb: below
    auto r = backend->Map(size);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->hugetlb);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->base) % (2 * kMiB), 0u) << "aligned for huge pages";
    EXPECT_EQ(r->huge_page_bytes, bytes) << "of " << size << " bytes";
    EXPECT_EQ(r->huge_pages, size == bytes);
    auto* seen = static_cast<const uint8_t*>(MapSharedAligned(r->shm_fd, size, PROT_READ));
    ASSERT_NE(seen, MAP_FAILED);
    unsigned sum = 0;
    for (size_t at = 0; at < size; at += 4096) sum += seen[at];  // a reader's faults
    EXPECT_EQ(HugePageBytes(seen, size), bytes) << "a reader maps them whole too; " << sum;
    munmap(const_cast<uint8_t*>(seen), size);
    ExpectReadOnlyForReaders(*r);
    backend->Unmap(*r);
  }
}

// Where huge pages are reserved, a daemon's shared pool takes them (a hugetlb memfd), sealed
// for readers as the shared memory one is.
TEST(MemoryBackend, ASharedPoolTakesReservedHugePages) {
  const size_t bytes = 64 * kMiB;
  if (FreeReservedHugePageBytes() < bytes)
    GTEST_SKIP() << "fewer than 64 MiB of huge pages reserved and free here (vm.nr_hugepages); "
                    "ASharedPoolIsReadOnlyForReaders covers the shared pool without them";
  auto backend = NewSharedHostBackend();
  auto r = backend->Map(bytes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->hugetlb);
  EXPECT_TRUE(r->huge_pages);
  EXPECT_EQ(r->huge_page_bytes, bytes);
  ExpectReadOnlyForReaders(*r);
  backend->Unmap(*r);
  auto odd = backend->Map(bytes + 4096);  // not a whole number of huge pages: shared memory
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  EXPECT_FALSE(odd->hugetlb);
  backend->Unmap(*odd);
}

}  // namespace
}  // namespace ecstore
