#include "base/memory_backend.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <fstream>
#include <string>

namespace ecstore {
namespace {

constexpr size_t kMiB = 1 << 20;

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

}  // namespace
}  // namespace ecstore
