// Crash consistency: a child process spills continuously and is killed with SIGKILL at a
// random moment. On reopen every entry is either absent or byte-exact, and everything the
// child had Flushed (acknowledged durable) is present.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <fstream>
#include <random>
#include <thread>

#include "base/test_util.h"
#include "base/units.h"
#include "store/store.h"

namespace ecstore {
namespace {

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
    for (const EntryInfo& e : *(*s)->List()) {
      uint64_t i = std::stoull(e.key.substr(1));
      std::vector<uint8_t> got(e.bytes);
      auto r = (*s)->Get("ns", e.key, {got.data(), got.size()});
      ASSERT_TRUE(r.ok()) << e.key << ": " << r.status().ToString();
      ASSERT_EQ(e.bytes, SizeOf(i));
      ASSERT_TRUE(got == testing::Payload(i, SizeOf(i))) << e.key << " has wrong bytes";
      ++present;
    }
    for (uint64_t i = 0; i < durable; ++i)
      ASSERT_TRUE(*(*s)->Contains("ns", "k" + std::to_string(i)))
          << "k" << i << " was flushed before the kill but is gone";
    std::printf("round %d: %llu durable, %llu present after SIGKILL\n", round,
                (unsigned long long)durable, (unsigned long long)present);
    ASSERT_TRUE((*s)->Close().ok());
  }
}

// Slows every header-block write (a record's header, or a tombstone) once armed, so a test
// can erase an entry while its spill is in flight and kill the process before the slow
// tombstone lands.
class SlowHeadersEnv : public EnvWrapper {
 public:
  SlowHeadersEnv() : EnvWrapper(Env::Default()) {}
  std::atomic<bool> armed{false};
  int BeforeIo(IoOp op, int, uint64_t, size_t len) override {
    if (armed && op == IoOp::kWrite && len == 4096)
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    return 0;
  }
};

// An Erase (or a replacing Put) acknowledged while the old entry was mid-spill is never
// undone by a crash: the old bytes do not come back after SIGKILL.
TEST(CrashConsistency, AcknowledgedEraseOfAnEntryMidSpillSurvivesSigkill) {
  for (bool replace : {false, true}) {
    SCOPED_TRACE(replace ? "replacing put" : "erase");
    testing::TempDir dir;
    int ack[2];
    ASSERT_EQ(pipe(ack), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      SlowHeadersEnv env;
      Options o;
      o.pool_bytes = 16 * kMiB;
      o.env = &env;
      auto s = Store::Open(dir.path(), o);
      if (!s.ok()) _exit(3);
      TensorMeta m{DType::kU8, {static_cast<int64_t>(kMiB)}};
      if (!(*s)->Put("ns", "victim", m, testing::Span(testing::Payload(1, kMiB))).ok()) _exit(4);
      env.armed = true;
      std::thread flusher([&] { (void)(*s)->Flush(); });  // the spill is now in flight
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      Status st = replace ? (*s)->Put("ns", "victim", m, testing::Span(testing::Payload(2, kMiB)))
                          : (*s)->Erase("ns", "victim");
      if (!st.ok()) _exit(5);
      if (write(ack[1], "A", 1) != 1) _exit(6);
      flusher.join();
      pause();  // until SIGKILL
      _exit(0);
    }
    close(ack[1]);
    char c;
    ASSERT_EQ(read(ack[0], &c, 1), 1) << "child failed before acknowledging";
    close(ack[0]);
    // Long enough for a spill that was still in flight at the ack to land, too short for
    // the slowed tombstone after it.
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    for (bool rebuild : {false, true}) {  // a plain open, then repair from the segments
      Options o;
      o.pool_bytes = 16 * kMiB;
      o.rebuild_index = rebuild;
      auto s = Store::Open(dir.path(), o);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      std::vector<uint8_t> got(kMiB);
      auto r = (*s)->Get("ns", "victim", {got.data(), got.size()});
      if (r.ok())
        EXPECT_TRUE(got != testing::Payload(1, kMiB))
            << "the erased/replaced bytes came back" << (rebuild ? " after repair" : "");
      else
        EXPECT_TRUE(r.status().IsNotFound()) << r.status().ToString();
      ASSERT_TRUE((*s)->Close().ok());
    }
  }
}

}  // namespace
}  // namespace ecstore
