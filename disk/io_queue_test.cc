#include "disk/io_queue.h"

#include <gtest/gtest.h>

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
