#include "disk/io_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/test_util.h"
#include "disk/aligned_buffer.h"
#include "disk/record.h"

namespace ecstore {
namespace {

// An I/O service and an O_DIRECT file holding `n` bytes of Payload(seed) it wrote.
struct WrittenFile {
  testing::TempDir dir;
  std::unique_ptr<IoService> svc;
  UniqueFd fd;
  AlignedBuffer data;
  WrittenFile(size_t n, unsigned depth, uint64_t chunk, uint64_t seed) : data(n) {
    auto s = IoService::Start(Env::Default(), depth, chunk);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) svc = std::move(s).value();
    auto f = Env::Default()->OpenFile(dir.sub("f"), O_RDWR | O_CREAT | O_DIRECT, 0644);
    EXPECT_TRUE(f.ok());
    if (f.ok()) fd = std::move(f).value();
    auto p = testing::Payload(seed, n);
    std::memcpy(data.data(), p.data(), n);
    if (svc && fd.get() >= 0) {
      EXPECT_TRUE(svc->Run({{IoOp::kWrite, fd.get(), data.data(), n, 0, 0}}).ok());
    }
  }
};

class FailReadsEnv : public EnvWrapper {
 public:
  FailReadsEnv() : EnvWrapper(Env::Default()) {}
  int BeforeIo(IoOp op, int, uint64_t, size_t) override { return op == IoOp::kRead ? EIO : 0; }
};

TEST(IoService, WritesAndReadsAtDepthWithODirect) {
  testing::TempDir dir;
  auto svc = IoService::Start(Env::Default(), 16, 256 * 1024);
  ASSERT_TRUE(svc.ok()) << svc.status().ToString();
  auto fd = Env::Default()->OpenFile(dir.sub("f"), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_TRUE(fd.ok());
  const size_t n = 8 << 20;  // 32 chunks of 256 KiB: the ring runs 16 deep
  AlignedBuffer w(n), r(n);
  auto p = testing::Payload(9, n);
  std::memcpy(w.data(), p.data(), n);
  ASSERT_TRUE((*svc)
                  ->Run({{IoOp::kWrite, fd->get(), w.data(), n, 0, 0},
                         {IoOp::kSync, fd->get(), nullptr, 0, 0, 0}})
                  .ok());
  ASSERT_TRUE((*svc)->Run({{IoOp::kRead, fd->get(), r.data(), n, 0, 0}}).ok());
  EXPECT_EQ(0, std::memcmp(r.data(), w.data(), n));
  // Past the end of the file is an error, not silently short data.
  Status st = (*svc)->Run({{IoOp::kRead, fd->get(), r.data(), 4096, n, 0}});
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
}

TEST(IoService, InjectedErrorsSurfaceAsStatus) {
  testing::TempDir dir;
  FailReadsEnv env;
  auto svc = IoService::Start(&env, 8, 1 << 20);
  ASSERT_TRUE(svc.ok());
  auto fd = Env::Default()->OpenFile(dir.sub("f"), O_RDWR | O_CREAT | O_DIRECT, 0644);
  AlignedBuffer b(1 << 20);
  ASSERT_TRUE((*svc)->Run({{IoOp::kWrite, fd->get(), b.data(), 1 << 20, 0, 0}}).ok());
  Status st = (*svc)->Run({{IoOp::kRead, fd->get(), b.data(), 1 << 20, 0, 0}});
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
}

}  // namespace
}  // namespace ecstore

namespace ecstore {
namespace {

// A read never waits behind a write batch: here the writes go into a pipe nobody drains, so
// they cannot complete until the test reads the pipe; a read of a file still completes.
TEST(IoService, ReadsAreNotQueuedBehindAStalledWriteBatch) {
  WrittenFile f(1 << 20, 8, 64 * 1024, 3);
  ASSERT_TRUE(f.svc && f.fd.get() >= 0);
  IoService* svc = f.svc.get();
  const int fd = f.fd.get();
  AlignedBuffer& data = f.data;
  AlignedBuffer got(1 << 20);
  int pipe_fds[2];
  ASSERT_EQ(0, pipe(pipe_fds));
  const size_t stalled = 4 << 20;  // far more than a pipe holds
  AlignedBuffer big(stalled);
  std::atomic<bool> writes_done{false};
  std::thread writer([&] {
    Status st = svc->Run({{IoOp::kWrite, pipe_fds[1], big.data(), stalled, 0, 0}});
    EXPECT_TRUE(st.ok()) << st.ToString();
    writes_done = true;
  });
  // The write batch holds the ring once its first bytes fill the pipe.
  const int pipe_bytes = fcntl(pipe_fds[1], F_GETPIPE_SZ);
  ASSERT_GT(pipe_bytes, 0);
  for (int queued = 0; queued < pipe_bytes;) {
    ASSERT_EQ(0, ioctl(pipe_fds[0], FIONREAD, &queued));
    if (queued < pipe_bytes) std::this_thread::yield();
  }
  ASSERT_TRUE(svc->Run({{IoOp::kRead, fd, got.data(), 1 << 20, 0, 0}}).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data(), 1 << 20));
  EXPECT_FALSE(writes_done) << "the write batch cannot finish before its pipe is drained";
  std::vector<char> sink(1 << 16);
  size_t drained = 0;
  while (drained < stalled) {  // each read waits for the writes' next bytes (2 s at most)
    pollfd p{pipe_fds[0], POLLIN, 0};
    ASSERT_EQ(1, poll(&p, 1, 2000)) << "the write batch stalled after " << drained << " bytes";
    ssize_t n = read(pipe_fds[0], sink.data(), sink.size());
    ASSERT_GT(n, 0);
    drained += static_cast<size_t>(n);
  }
  EXPECT_EQ(drained, stalled);
  writer.join();
  EXPECT_TRUE(writes_done);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

// IoProgress gives each request's bytes once, in order, as they land: checksumming what it
// gives equals checksumming the whole buffer afterwards.
TEST(IoService, ProgressGivesEachRequestsBytesOnceAndInOrder) {
  const size_t n = 9 << 20;
  WrittenFile f(n, 8, 256 * 1024, 5);
  ASSERT_TRUE(f.svc && f.fd.get() >= 0);
  IoService* svc = f.svc.get();
  const int fd = f.fd.get();
  AlignedBuffer& w = f.data;
  AlignedBuffer r(n);
  const std::vector<IoRequest> batch = {
      {IoOp::kRead, fd, r.data(), 4096, 0, 0},
      {IoOp::kRead, fd, r.data() + 4096, (3 << 20) - 4096, 4096, 0},
      {IoOp::kRead, fd, r.data() + (3 << 20), 6 << 20, 3 << 20, 0}};
  std::vector<uint64_t> given(batch.size());
  std::vector<PayloadHasher> hash;
  for (const IoRequest& req : batch) hash.emplace_back(req.len);
  size_t calls = 0;
  auto progress = [&](size_t i, uint64_t from, uint64_t len) {
    ASSERT_LT(i, batch.size());
    EXPECT_EQ(from, given[i]) << "request " << i << " skipped or repeated bytes";
    given[i] = from + len;
    hash[i].Update(static_cast<const uint8_t*>(batch[i].buf) + from, len);
    ++calls;
  };
  ASSERT_TRUE(svc->Run(batch, progress).ok());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(given[i], batch[i].len);
    ASSERT_TRUE(hash[i].complete());
    EXPECT_EQ(hash[i].Digest(), PayloadChecksum(w.data() + batch[i].offset, batch[i].len));
  }
  EXPECT_GT(calls, batch.size()) << "a 6 MiB read lands in pieces, not all at the end";
}

// Progress runs while the rest of the batch is still in flight: here the read is of a pipe,
// whose writer sends its second half only once the first half has been handed to progress.
// The short transfer of the first half is resumed.
TEST(IoService, ProgressComesWhileTheRestIsStillInFlight) {
  auto svc = IoService::Start(Env::Default(), 8, 64 * 1024);
  ASSERT_TRUE(svc.ok());
  int pipe_fds[2];
  ASSERT_EQ(0, pipe(pipe_fds));
  const size_t half = 16 * 1024;
  auto p = testing::Payload(7, 2 * half);
  std::vector<uint8_t> got(2 * half);
  Mutex mu;
  CondVar cv;
  uint64_t landed = 0;
  std::thread writer([&] {
    ASSERT_EQ(static_cast<ssize_t>(half), write(pipe_fds[1], p.data(), half));
    UniqueLock l(&mu);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (landed < half && cv.WaitUntil(l, until)) {
    }
    const bool early = landed >= half;
    EXPECT_TRUE(early) << "the first half was not given while the read was in flight";
    l.unlock();
    ASSERT_EQ(static_cast<ssize_t>(half), write(pipe_fds[1], p.data() + half, half));
  });
  Status st = (*svc)->Run({{IoOp::kRead, pipe_fds[0], got.data(), 2 * half, 0, 0}},
                          [&](size_t, uint64_t from, uint64_t len) {
                            MutexLock l(&mu);
                            EXPECT_EQ(from, landed);
                            landed = from + len;
                            cv.NotifyAll();
                          });
  writer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(landed, 2 * half);
  EXPECT_EQ(0, std::memcmp(got.data(), p.data(), got.size()));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

// Counts the read pieces handed to the ring.
class CountReadsEnv : public EnvWrapper {
 public:
  CountReadsEnv() : EnvWrapper(Env::Default()) {}
  int BeforeIo(IoOp op, int, uint64_t, size_t len) override {
    if (op == IoOp::kRead) {
      ++reads;
      largest = std::max<uint64_t>(largest, len);
    }
    return 0;
  }
  std::atomic<unsigned> reads{0};
  std::atomic<uint64_t> largest{0};
};

// Pieces handed to the ring while a read of an empty pipe waits: nothing completes, so the
// count is what the service keeps in flight for that batch.
unsigned InFlightWhileStalled(bool followed, CountReadsEnv* env, uint64_t* largest) {
  auto svc = IoService::Start(env, 16, 1 << 20, /*followed_window=*/4);
  EXPECT_TRUE(svc.ok());
  int fds[2];
  EXPECT_EQ(0, pipe(fds));
  const size_t n = 4 << 20;
  std::vector<uint8_t> got(n);
  std::thread reader([&] {
    IoProgress progress = [](size_t, uint64_t, uint64_t) {};
    Status st = (*svc)->Run({{IoOp::kRead, fds[0], got.data(), n, 0, 0}},
                            followed ? progress : IoProgress());
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  for (int i = 0; i < 200 && env->reads == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // any more pieces come now
  const unsigned stalled = env->reads;
  *largest = env->largest;
  std::vector<uint8_t> fill(n, 1);  // now let every piece complete
  for (size_t at = 0; at < n;) {
    ssize_t w = write(fds[1], fill.data() + at, n - at);
    if (w <= 0) break;
    at += static_cast<size_t>(w);
  }
  reader.join();
  close(fds[0]);
  close(fds[1]);
  return stalled;
}

// A batch of reads whose caller follows its progress keeps at most the window in flight, in
// pieces small enough to take several windows; any other batch fills the ring.
TEST(IoService, AFollowedReadKeepsAtMostItsWindowInFlight) {
  CountReadsEnv followed_env, plain_env;
  uint64_t followed_piece = 0, plain_piece = 0;
  EXPECT_EQ(4u, InFlightWhileStalled(true, &followed_env, &followed_piece));
  EXPECT_LE(followed_piece, IoService::kFollowedPieceBytes);
  EXPECT_GE(followed_env.reads, 4u * IoService::kFollowedWaves);
  EXPECT_EQ(16u, InFlightWhileStalled(false, &plain_env, &plain_piece));
  EXPECT_EQ(plain_piece, (4u << 20) / 16);
}

}  // namespace
}  // namespace ecstore
