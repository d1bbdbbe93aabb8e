#include "disk/io_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "disk/aligned_buffer.h"
#include "tests/test_util.h"

namespace ecstore {
namespace {

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
  testing::TempDir dir;
  auto svc = IoService::Start(Env::Default(), 8, 64 * 1024);
  ASSERT_TRUE(svc.ok());
  auto fd = Env::Default()->OpenFile(dir.sub("f"), O_RDWR | O_CREAT | O_DIRECT, 0644);
  ASSERT_TRUE(fd.ok());
  AlignedBuffer data(1 << 20), got(1 << 20);
  auto p = testing::Payload(3, 1 << 20);
  std::memcpy(data.data(), p.data(), p.size());
  ASSERT_TRUE((*svc)->Run({{IoOp::kWrite, fd->get(), data.data(), 1 << 20, 0, 0}}).ok());
  int pipe_fds[2];
  ASSERT_EQ(0, pipe(pipe_fds));
  const size_t stalled = 4 << 20;  // far more than a pipe holds
  AlignedBuffer big(stalled);
  std::atomic<bool> writes_done{false};
  std::thread writer([&] {
    Status st = (*svc)->Run({{IoOp::kWrite, pipe_fds[1], big.data(), stalled, 0, 0}});
    EXPECT_TRUE(st.ok()) << st.ToString();
    writes_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the writes take the ring
  ASSERT_TRUE((*svc)->Run({{IoOp::kRead, fd->get(), got.data(), 1 << 20, 0, 0}}).ok());
  EXPECT_EQ(0, std::memcmp(got.data(), data.data(), 1 << 20));
  EXPECT_FALSE(writes_done) << "the write batch cannot finish before its pipe is drained";
  std::vector<char> sink(1 << 16);
  size_t drained = 0;
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  for (int idle = 0; drained < stalled && idle < 2000;) {
    ssize_t n = read(pipe_fds[0], sink.data(), sink.size());
    if (n > 0) {
      drained += static_cast<size_t>(n);
      idle = 0;
    } else {
      ++idle;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  EXPECT_EQ(drained, stalled);
  writer.join();
  EXPECT_TRUE(writes_done);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace ecstore
