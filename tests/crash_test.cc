// Crash consistency: a child process spills continuously and is killed with SIGKILL at a
// random moment. On reopen every entry is either absent or byte-exact, and everything the
// child had Flushed (acknowledged durable) is present.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <random>
#include <thread>

#include "store/store.h"
#include "tests/test_util.h"

namespace ecstore {
namespace {

constexpr uint64_t kMiB = 1 << 20;

size_t SizeOf(uint64_t i) { return (1 + i % 5) * kMiB + (i % 3) * 4098; }

[[noreturn]] void ChildWorkload(const std::string& dir) {
  Options o;
  o.pool_bytes = 16 * kMiB;
  auto s = Store::Open(dir, o);
  if (!s.ok()) _exit(3);
  for (uint64_t i = 0;; ++i) {
    auto p = testing::Payload(i, SizeOf(i));
    TensorMeta m{DType::kU8, {static_cast<int64_t>(p.size())}};
    if (!(*s)->Put("ns", "k" + std::to_string(i), m, testing::Span(p)).ok()) _exit(4);
    if (i % 8 == 7) {
      if (!(*s)->Flush().ok()) _exit(5);
      std::ofstream(dir + "/durable.tmp") << (i + 1);
      std::rename((dir + "/durable.tmp").c_str(), (dir + "/durable").c_str());
    }
  }
}

TEST(CrashConsistency, SigkillMidSpillLosesNothingDurableAndServesNothingCorrupt) {
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 4; ++round) {
    testing::TempDir dir;
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ChildWorkload(dir.path());
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 900));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with " << WEXITSTATUS(status);

    uint64_t durable = 0;
    std::ifstream(dir.path() + "/durable") >> durable;
    Options o;
    o.pool_bytes = 16 * kMiB;
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    uint64_t present = 0;
    for (const EntryInfo& e : (*s)->List()) {
      uint64_t i = std::stoull(e.key.substr(1));
      std::vector<uint8_t> got(e.bytes);
      auto r = (*s)->Get("ns", e.key, {got.data(), got.size()});
      ASSERT_TRUE(r.ok()) << e.key << ": " << r.status().ToString();
      ASSERT_EQ(e.bytes, SizeOf(i));
      ASSERT_TRUE(got == testing::Payload(i, SizeOf(i))) << e.key << " has wrong bytes";
      ++present;
    }
    for (uint64_t i = 0; i < durable; ++i)
      ASSERT_TRUE((*s)->Contains("ns", "k" + std::to_string(i)))
          << "k" << i << " was flushed before the kill but is gone";
    std::printf("round %d: %llu durable, %llu present after SIGKILL\n", round,
                (unsigned long long)durable, (unsigned long long)present);
    ASSERT_TRUE((*s)->Close().ok());
  }
}

}  // namespace
}  // namespace ecstore
