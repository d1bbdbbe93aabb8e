// The Evictor base on its own, with a fake move (EvictSomeLocked takes the coldest unleased
// entry out of the keydir, or fails as told): Puts that wait for room, give up at their
// deadline saying why, and stop waiting after two failed moves in a row.
#include "store/evictor.h"

#include <gtest/gtest.h>

#include <chrono>

#include "store/keydir_test_util.h"

namespace ecstore {
namespace {

using std::chrono::milliseconds;
using testing::KeydirFixture;

constexpr uint64_t kBlock = 64 << 10;

class FakeEvictor : public Evictor {
 public:
  FakeEvictor(Keydir* kd, milliseconds put_wait) : Evictor(kd, kd->host_tier(), put_wait) {}
  ~FakeEvictor() override { Stop(); }
  Status fail;  // under kd's mu: the error the next moves fail with (Ok: they succeed)
  int moves = 0;

 protected:
  bool EvictSomeLocked() override REQUIRES(kd_->mu) {
    ++moves;
    if (!fail.ok()) {
      NoteMoveResultLocked(fail, 1);
      return false;
    }
    for (uint64_t id : tier().Coldest(64)) {
      Entry* e = reinterpret_cast<Entry*>(id);
      if (e->leases > 0) continue;
      kd_->RemoveLocked(e);
      NoteMoveResultLocked(Status::Ok(), 1);
      return true;
    }
    return false;
  }
};

// A 1 MiB pool full of 16 entries of 64 KiB, k0 the coldest.
void Fill(KeydirFixture& f) {
  for (int i = 0; i < 16; ++i) f.Insert("k" + std::to_string(i), kBlock);
}

TEST(Evictor, APutWaitsWhileTheEvictorFreesTheColdestEntry) {
  KeydirFixture f;
  Fill(f);
  FakeEvictor ev(f.kd.get(), milliseconds(10000));
  PoolBlock b;
  Status busy = ev.Allocate(kBlock, /*wait=*/false, &b);
  EXPECT_TRUE(busy.IsBusy()) << busy.ToString();
  EXPECT_NE(busy.message().find("no free pool block"), std::string::npos);
  ev.Start();
  ASSERT_TRUE(ev.Allocate(kBlock, /*wait=*/true, &b).ok());
  Keydir::Lock l(f.kd.get());
  EXPECT_GE(ev.moves, 1);
  EXPECT_TRUE(f.kd->FindLocked("ns", "k0", false).status().IsNotFound()) << "the coldest went";
  EXPECT_TRUE(f.kd->FindLocked("ns", "k15", false).ok()) << "the warmest stayed";
  f.pool->Free(b);
}

TEST(Evictor, WithEverythingLeasedAPutGivesUpAtItsDeadlineSayingWhy) {
  KeydirFixture f;
  Fill(f);
  std::vector<ReadLease> leases;
  {
    Keydir::Lock l(f.kd.get());
    for (int i = 0; i < 16; ++i)
      leases.push_back(f.kd->LeaseLocked(*f.kd->FindLocked("ns", "k" + std::to_string(i), false)));
  }
  FakeEvictor ev(f.kd.get(), milliseconds(100));
  ev.Start();
  PoolBlock b;
  Status st = ev.Allocate(kBlock, /*wait=*/true, &b);
  EXPECT_TRUE(st.IsBusy()) << st.ToString();
  EXPECT_NE(st.message().find("pool is full (16 entries, 16 leased)"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("release leases or raise Options::pool_bytes"), std::string::npos);
  leases.clear();  // released: the next put finds room
  ASSERT_TRUE(ev.Allocate(kBlock, /*wait=*/true, &b).ok());
  Keydir::Lock l(f.kd.get());
  f.pool->Free(b);
}

TEST(Evictor, TwoFailedMovesInARowEndAWaitingPutWithTheirError) {
  KeydirFixture f;
  Fill(f);
  FakeEvictor ev(f.kd.get(), milliseconds(60000));
  {
    Keydir::Lock l(f.kd.get());
    ev.fail = Status::IOError("the disk is gone");
  }
  ev.Start();
  PoolBlock b;
  const auto began = std::chrono::steady_clock::now();
  Status st = ev.Allocate(kBlock, /*wait=*/true, &b);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(30))
      << "not the 60 s put_wait";
  EXPECT_TRUE(st.IsIOError()) << st.ToString();
  EXPECT_NE(st.message().find("pool is full and moving entries out of it failed: the disk is gone"),
            std::string::npos)
      << st.message();
  EXPECT_GE(ev.Errors(), 2u);
  EXPECT_FALSE(ev.Health().ok());

  {
    Keydir::Lock l(f.kd.get());
    ev.fail = Status::Ok();  // the disk is back: the next move succeeds, health with it
  }
  ASSERT_TRUE(ev.Allocate(kBlock, /*wait=*/true, &b).ok());
  EXPECT_TRUE(ev.Health().ok()) << ev.Health().ToString();
  Keydir::Lock l(f.kd.get());
  f.pool->Free(b);
}

}  // namespace
}  // namespace ecstore
