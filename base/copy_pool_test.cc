#include "base/copy_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <numeric>
#include <random>
#include <thread>

#include "base/test_util.h"

namespace ecstore {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Sizes that are not multiples of a piece, and ones below the size the helpers take part at.
TEST(CopyPool, EveryByteLandsWhateverTheSizes) {
  CopyPool pool(3);
  const std::vector<size_t> sizes = {1, 4096, (4u << 20) + 7, (9u << 20) + 4095, 17u << 20, 0};
  std::vector<std::vector<uint8_t>> src, dst;
  std::vector<CopyPool::Item> items;
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.push_back(Bytes(sizes[i], i));
    dst.emplace_back(sizes[i], 0);
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    items.push_back({dst[i].data(), src[i].data(), sizes[i]});
  pool.Copy(items);
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_TRUE(dst[i] == src[i]) << sizes[i];
  std::vector<uint8_t> small_dst(100);
  auto small_src = Bytes(100, 9);
  pool.Copy({{small_dst.data(), small_src.data(), 100}});  // on the caller alone
  EXPECT_TRUE(small_dst == small_src);
}

// Several callers at once, many jobs each: a caller that finds the helpers busy copies alone,
// and no job sees another's pieces.
TEST(CopyPool, ConcurrentCallersEachGetTheirOwnBytes) {
  CopyPool pool(2);
  const size_t n = (12u << 20) + 123;
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      auto src = Bytes(n, 100 + c);
      std::vector<uint8_t> dst(n);
      for (int round = 0; round < 20; ++round) {
        std::fill(dst.begin(), dst.end(), 0);
        pool.Copy(
            {{dst.data(), src.data(), n / 2}, {dst.data() + n / 2, src.data() + n / 2, n - n / 2}});
        if (dst != src) ++bad;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(CopyPool, HelpersScaleWithCoresAndStayFew) {
  EXPECT_EQ(CopyPool::DefaultThreads(0), 0u);
  EXPECT_EQ(CopyPool::DefaultThreads(1), 0u);
  EXPECT_EQ(CopyPool::DefaultThreads(2), 1u);
  EXPECT_EQ(CopyPool::DefaultThreads(3), 1u);
  EXPECT_EQ(CopyPool::DefaultThreads(4), 1u);
  EXPECT_EQ(CopyPool::DefaultThreads(8), 2u);
  EXPECT_EQ(CopyPool::DefaultThreads(64), 3u);
  CopyPool none(0);
  std::vector<uint8_t> src = Bytes(9u << 20, 1), dst(9u << 20);
  none.Copy({{dst.data(), src.data(), src.size()}});
  EXPECT_TRUE(dst == src);
}

// A daemon's pool: more helpers (it shares its process with no engine), none on 2 cores.
TEST(CopyPool, ServerHelpersAreHalfTheCoresLessTheCaller) {
  EXPECT_EQ(CopyPool::ServerThreads(0), 0u);
  EXPECT_EQ(CopyPool::ServerThreads(1), 0u);
  EXPECT_EQ(CopyPool::ServerThreads(2), 0u);
  EXPECT_EQ(CopyPool::ServerThreads(4), 1u);
  EXPECT_EQ(CopyPool::ServerThreads(16), 7u);
  EXPECT_EQ(CopyPool::ServerThreads(128), 7u);
}

// Helpers that cannot start (here: an address-space limit leaves room for about two 8 MiB
// stacks) are done without, and every byte still lands; the process does not abort.
TEST(CopyPool, HelpersThatCannotStartAreDoneWithout) {
#if defined(EC_SANITIZED)
  GTEST_SKIP() << "RLIMIT_AS cannot be lowered under a sanitizer (its shadow memory)";
#endif
  auto src = Bytes(9u << 20, 3);
  std::vector<uint8_t> dst(src.size());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::ifstream f("/proc/self/status");
    std::string line;
    uint64_t vm = 0;
    while (std::getline(f, line))
      if (line.rfind("VmSize:", 0) == 0) vm = std::stoull(line.substr(7)) * 1024;
    rlimit lim{vm + (20u << 20), vm + (20u << 20)};
    setrlimit(RLIMIT_AS, &lim);
    CopyPool pool(16, 1u << 20);
    pool.Copy({{dst.data(), src.data(), src.size()}});
    _exit(pool.threads() < 16 && dst == src ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Small pieces (a daemon's 1 MiB): a 2.9 MB copy is split, and every byte still lands, the
// tail piece shorter than the rest; a piece size below a page is raised to one.
TEST(CopyPool, SmallPiecesSplitSmallCopies) {
  for (size_t piece : {size_t{1} << 20, size_t{1}}) {
    CopyPool pool(3, piece);
    for (size_t n : {size_t{2867200}, (size_t{1} << 20) * 2 - 1, size_t{8193}}) {
      auto src = Bytes(n, n);
      std::vector<uint8_t> dst(n);
      pool.Copy({{dst.data(), src.data(), n}});
      EXPECT_TRUE(dst == src) << n << " in pieces of " << piece;
    }
  }
}

}  // namespace
}  // namespace ecstore
