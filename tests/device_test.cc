// The device tier on a real GPU. Without one these tests skip and say why; `make test-gpu`
// (on the GPU machine) sets EC_REQUIRE_GPU=1, which turns a skip into a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "base/units.h"
#include "cache/buffer_io.h"
#include "cache/device_load.h"
#include "cuda/cuda.h"
#include "net/client.h"
#include "server/device_puts.h"
#include "store/store.h"
#include "tests/device_test_util.h"
#include "tests/gpu_test_util.h"

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ecstore {
namespace {

using testing::Bf16;
#ifdef EC_HAVE_CUDA
using testing::ConnectUnix;
using testing::DeviceBuffer;
using testing::StartServer;
using testing::StopProcess;
#endif
using testing::Payload;
using testing::Span;
using testing::TempDir;

#ifdef EC_HAVE_CUDA
Options WithDevice(uint64_t pool, uint64_t device_pool) {
  Options o;
  o.pool_bytes = pool;
  o.device_pool_bytes = device_pool;
  o.put_wait = std::chrono::milliseconds(3000);
  return o;
}

void PutFromDevice(Store* s, const std::string& key, uint64_t seed, uint64_t bytes) {
  DeviceBuffer src(bytes);
  src.Fill(seed);
  Status st = s->PutFromDevice("ns", key, Bf16(bytes), src.get(), bytes);
  ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
}

void ExpectOnDevice(Store* s, const std::string& key, uint64_t seed, uint64_t bytes) {
  DeviceBuffer dst(bytes);
  auto info = s->GetToDevice("ns", key, dst.get(), bytes);
  ASSERT_TRUE(info.ok()) << key << ": " << info.status().ToString();
  EXPECT_TRUE(dst.Read() == Payload(seed, bytes)) << key << ": bytes differ on the device";
}
#endif

TEST(DeviceTier, NeedsAGpuAndSaysSo) {
  TempDir dir;
  Options o;
  o.pool_bytes = 8 * kMiB;
  auto s = Store::Open(dir.path(), o);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->PutFromDevice("ns", "k", Bf16(4096), nullptr, 4096);
  EXPECT_TRUE(st.IsUnavailable()) << st.ToString();
  EXPECT_NE(st.message().find("device_pool_bytes"), std::string::npos) << st.message();
  EXPECT_EQ((*s)->device_region().base, nullptr);
  std::string why;
  if (cuda::DeviceCount(&why) > 0) return;
  // No GPU: no dma-buf to give the NIC either (a server then stages RDMA reads of device
  // entries through the host pool), and it says so.
  auto fd = cuda::DmaBufFd(nullptr, 4096);
  ASSERT_FALSE(fd.ok());
  EXPECT_TRUE(fd.status().IsUnavailable()) << fd.status().ToString();
  o.device_pool_bytes = 8 * kMiB;  // no GPU here: opening a device tier fails, clearly
  TempDir dir2;
  auto bad = Store::Open(dir2.path(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsUnavailable()) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("GPU"), std::string::npos) << bad.status().message();
}

#ifdef EC_HAVE_CUDA
TEST(DeviceTier, ByteExactAcrossAllThreeTiersAndThroughAReopen) {
  REQUIRE_GPU();
  TempDir dir;
  const uint64_t n = 3 * kMiB;
  {
    auto s = Store::Open(dir.path(), WithDevice(16 * kMiB, 8 * kMiB));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Store* st = s->get();
    ASSERT_NE(st->device_region().base, nullptr);
    for (int i = 0; i < 12; ++i) PutFromDevice(st, "k" + std::to_string(i), i, n);
    // 36 MiB through an 8 MiB device pool and a 16 MiB host pool: demoted, then spilled.
    StoreStats stats = *st->Stats();
    EXPECT_GT(stats.of(Tier::kDevice).spills, 0u) << "nothing was demoted";
    EXPECT_GT(stats.pool().spills, 0u) << "nothing was spilled";
    for (int i = 0; i < 12; ++i) ExpectOnDevice(st, "k" + std::to_string(i), i, n);
    std::vector<uint8_t> host(n);  // and to host memory, from any tier
    for (int i = 0; i < 12; ++i) {
      ASSERT_TRUE(st->Get("ns", "k" + std::to_string(i), {host.data(), n}).ok());
      EXPECT_TRUE(host == Payload(i, n)) << i;
    }
    // A host lease of a device-only entry stages it through the host pool (what a TCP or
    // RDMA reader gets where GPUDirect is not available); the device copy stays.
    PutFromDevice(st, "staged", 42, n);
    {
      auto host = st->Acquire("ns", "staged");
      ASSERT_TRUE(host.ok()) << host.status().ToString();
      EXPECT_EQ(host->memory_kind(), MemoryKind::kHost);
      EXPECT_TRUE(std::vector<uint8_t>(host->data(), host->data() + n) == Payload(42, n));
      EXPECT_TRUE(host->info().tiers.has(Tier::kDevice) && host->info().tiers.has(Tier::kPool));
    }
    PutFromDevice(st, "last", 99, n);  // device only at close: Close persists it
    ASSERT_TRUE(st->Close().ok());
  }
  Options host_only;
  host_only.pool_bytes = 16 * kMiB;
  auto s = Store::Open(dir.path(), host_only);  // no device tier: all from disk
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> got(n);
  ASSERT_TRUE((*s)->Get("ns", "last", {got.data(), n}).ok());
  EXPECT_TRUE(got == Payload(99, n));
  ASSERT_TRUE((*s)->Close().ok());
  auto again = Store::Open(dir.path(), WithDevice(16 * kMiB, 8 * kMiB));  // disk -> device
  ASSERT_TRUE(again.ok());
  for (int i = 0; i < 12; ++i) ExpectOnDevice(again->get(), "k" + std::to_string(i), i, n);
}

TEST(DeviceTier, LeasedDeviceEntriesAreNeverDemotedOrOverwritten) {
  REQUIRE_GPU();
  TempDir dir;
  const uint64_t n = 2 * kMiB;
  auto s = Store::Open(dir.path(), WithDevice(32 * kMiB, 6 * kMiB));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store* st = s->get();
  PutFromDevice(st, "held", 1, n);
  auto lease = st->AcquireOnDevice("ns", "held");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->memory_kind(), MemoryKind::kDevice);
  const uint8_t* where = lease->data();
  for (int i = 0; i < 10; ++i) PutFromDevice(st, "p" + std::to_string(i), 100 + i, n);
  EXPECT_TRUE(DeviceBuffer::ReadAt(where, n) == Payload(1, n)) << "a leased entry was overwritten";
  auto info = st->Lookup("ns", "held");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->tiers.has(Tier::kDevice));
  lease = Status::NotFound("released");
  for (int i = 0; i < 10; ++i) PutFromDevice(st, "q" + std::to_string(i), 200 + i, n);
  ExpectOnDevice(st, "held", 1, n);  // demoted once released, still byte-exact
}

TEST(DeviceTier, AcquireOnDevicePromotesAHostEntry) {
  REQUIRE_GPU();
  TempDir dir;
  const uint64_t n = 1 * kMiB + 4096;
  auto s = Store::Open(dir.path(), WithDevice(16 * kMiB, 8 * kMiB));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto bytes = Payload(7, n);
  ASSERT_TRUE((*s)->Put("ns", "h", Bf16(n), {bytes.data(), n}).ok());
  auto lease = (*s)->AcquireOnDevice("ns", "h");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ(lease->memory_kind(), MemoryKind::kDevice);
  EXPECT_TRUE(lease->info().tiers.has(Tier::kDevice));
  EXPECT_TRUE(lease->info().tiers.has(Tier::kPool));
  EXPECT_TRUE(DeviceBuffer::ReadAt(lease->data(), n) == bytes);
  EXPECT_EQ((*s)->Stats()->of(Tier::kDevice).promotions, 1u);
}

// Entries read from disk onto the device whose host copies were then evicted: durable on
// disk already, so a close (a daemon's SIGTERM) has nothing to demote. Demoting them anyway
// made host copies the host evictor dropped at once, and the close never ended.
TEST(DeviceTier, CloseWithDiskEntriesOnTheDeviceEnds) {
  REQUIRE_GPU();
  TempDir dir;
  const uint64_t n = 1 * kMiB;
  auto s = Store::Open(dir.path(), WithDevice(8 * kMiB, 8 * kMiB));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 6; ++i) {
    auto bytes = Payload(i, n);
    ASSERT_TRUE((*s)->Put("ns", "d" + std::to_string(i), Bf16(n), {bytes.data(), n}).ok());
  }
  ASSERT_TRUE((*s)->Flush().ok());
  for (int i = 0; i < 6; ++i) {
    auto lease = (*s)->AcquireOnDevice("ns", "d" + std::to_string(i));
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  }
  for (int i = 0; i < 12; ++i) {  // pushes the host copies out (clean: on disk already)
    auto bytes = Payload(100 + i, n);
    ASSERT_TRUE((*s)->Put("ns", "h" + std::to_string(i), Bf16(n), {bytes.data(), n}).ok());
  }
  std::promise<Status> closed;
  std::future<Status> done = closed.get_future();
  std::thread closer([&] { closed.set_value((*s)->Close()); });
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "Close did not end within 60 s";
    std::fflush(stdout);
    std::_Exit(1);  // the closing thread cannot be stopped: end here, saying why
  }
  closer.join();
  EXPECT_TRUE(done.get().ok());
  auto again = Store::Open(dir.path(), WithDevice(8 * kMiB, 8 * kMiB));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (int i = 0; i < 6; ++i) ExpectOnDevice(again->get(), "d" + std::to_string(i), i, n);
}

// ---- same-host consumers over CUDA IPC: the server is an `ec-store serve` process (a CUDA
// allocation cannot be IPC-opened by the process that made it).

// The GPU's free memory, as every process on it sees it.
int64_t FreeDeviceBytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  return static_cast<int64_t>(free);
}

// Polls until the GPU's free memory is within `slack` of `before`, for at most `limit`;
// returns how long that took in ms, or -1.
int64_t MsUntilFreeAgain(int64_t before, int64_t slack, std::chrono::milliseconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < limit) {
    if (before - FreeDeviceBytes() < slack)
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
          .count();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

uint64_t Leases(net::Client* c) {
  auto s = c->Stats();
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? s->leases : ~0ull;
}

// This test binary run again as a child process for the one test `filter` (a test that skips
// unless EC_CHILD_DIR is set), with EC_CHILD_DIR set to `dir` and EC_CHILD_FD to the write
// end of a pipe whose read end is returned in *fd.
pid_t StartChildTest(const std::string& filter, const std::string& dir, int* fd) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  pid_t child = fork();
  if (child == 0) {
    close(p[0]);
    setenv("EC_CHILD_DIR", dir.c_str(), 1);
    setenv("EC_CHILD_FD", std::to_string(p[1]).c_str(), 1);
    const std::string arg = "--gtest_filter=" + filter;
    execl("/proc/self/exe", "ecstore_tests", arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(p[1]);
  *fd = p[0];
  return child;
}

// Run as a child (EC_CHILD_DIR set): takes a device lease in the server, says so on
// EC_CHILD_FD, and waits to be killed without releasing it.
TEST(DeviceIpc, ConsumerThatCrashes) {
  const char* dir = std::getenv("EC_CHILD_DIR");
  if (!dir) GTEST_SKIP() << "the crashing consumer of DeviceIpc.ASecondProcess... (a child)";
  auto c = ConnectUnix(dir);
  ASSERT_NE(c, nullptr);
  auto lease = c->AcquireOnDevice("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  int fd = std::atoi(std::getenv("EC_CHILD_FD"));
  ASSERT_EQ(write(fd, "1", 1), 1);
  pause();
}

TEST(DeviceIpc, ASecondProcessReadsDeviceEntriesAndACrashReleasesItsLeases) {
  REQUIRE_GPU();
  TempDir dir;
  const std::string served = dir.sub("served");
  pid_t server = StartServer(served);
  auto c = ConnectUnix(served);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->caps().device_memory);
  const uint64_t n = 2 * kMiB + 4096;
  auto bytes = Payload(11, n);
  ASSERT_TRUE(c->Put("ns", "k", Bf16(n), {bytes.data(), n}).ok());
  {
    auto lease = c->AcquireOnDevice("ns", "k");  // promoted host -> device in the server
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ(lease->memory_kind(), MemoryKind::kDevice);
    EXPECT_TRUE(lease->info().tiers.has(Tier::kDevice));
    EXPECT_TRUE(DeviceBuffer::ReadAt(lease->data(), n) == bytes) << "read over CUDA IPC";
    DeviceBuffer copy(n);  // the consumer's own device -> device copy out of the lease
    ASSERT_EQ(cudaMemcpy(copy.get(), lease->data(), n, cudaMemcpyDeviceToDevice), cudaSuccess);
    EXPECT_TRUE(copy.Read() == bytes);
    EXPECT_EQ(Leases(c.get()), 1u);
  }
  EXPECT_EQ(Leases(c.get()), 0u);  // released when the lease went

  // A consumer that takes a lease and dies (SIGKILL) leaves none behind.
  int ready = -1;
  pid_t child = StartChildTest("DeviceIpc.ConsumerThatCrashes", served, &ready);
  char b = 0;
  ASSERT_EQ(read(ready, &b, 1), 1) << "the consumer never took its lease";
  close(ready);
  EXPECT_EQ(Leases(c.get()), 1u);
  StopProcess(child, SIGKILL);
  uint64_t left = 1;
  for (int i = 0; i < 100 && left != 0; ++i) {
    left = Leases(c.get());
    if (left) usleep(20000);
  }
  EXPECT_EQ(left, 0u) << "a crashed consumer's lease was not released";
  c.reset();
  StopProcess(server, SIGTERM);
}

// A device lease outlives its client's reconnect to a restarted daemon (net/lease_generation.h):
// the old daemon's device pool stays opened, and readable, until the lease goes, and then it
// comes back to the GPU.
TEST(DeviceIpc, ADeviceLeaseOutlivesAReconnectAndTheOldPoolComesBackWhenItGoes) {
  REQUIRE_GPU();
  TempDir dir;
  const std::string served = dir.sub("served");
  constexpr uint64_t kPool = 512 * kMiB;
  pid_t server = StartServer(served, "512MiB");
  auto c = ConnectUnix(served);
  ASSERT_NE(c, nullptr);
  const uint64_t n = 2 * kMiB + 4096;
  auto bytes = Payload(12, n);
  ASSERT_TRUE(c->Put("ns", "k", Bf16(n), {bytes.data(), n}).ok());
  auto lease = c->AcquireOnDevice("ns", "k");
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  StopProcess(server, SIGKILL);
  server = StartServer(served, "512MiB");
  auto other = Payload(13, n);
  ASSERT_TRUE(c->Put("ns", "other", Bf16(n), {other.data(), n}).ok());  // reconnects
  auto fresh = c->AcquireOnDevice("ns", "other");  // the new daemon's pool, opened here
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE(DeviceBuffer::ReadAt(lease->data(), n) == bytes) << "the old lease's bytes";
  EXPECT_TRUE(DeviceBuffer::ReadAt(fresh->data(), n) == other);
  const int64_t held = FreeDeviceBytes();
  lease = Status::NotFound("released");
  const int64_t back =
      MsUntilFreeAgain(held + static_cast<int64_t>(kPool), kPool / 4, std::chrono::seconds(5));
  std::printf(
      "[ measured ] the dead daemon's %llu MiB device pool back %lld ms after its last "
      "lease went\n",
      static_cast<unsigned long long>(kPool / kMiB), static_cast<long long>(back));
  EXPECT_GE(back, 0) << "the old daemon's device pool was not given back";
  EXPECT_TRUE(DeviceBuffer::ReadAt(fresh->data(), n) == other);
  fresh = Status::NotFound("released");
  EXPECT_EQ(Leases(c.get()), 0u);
  c.reset();
  StopProcess(server, SIGTERM);
}

// PUT_DEVICE (net/device_put.h): the server opens this process's allocation over CUDA IPC
// and copies from it itself -- device->host into its pool, or device->device into its
// device tier. Puts from inside an allocation (an offset), the same allocation again (its
// mapping reused) and a block freed and allocated again (a new buffer id: opened afresh,
// never read through the old mapping) all store exactly the bytes written.
void ExpectDevicePutsStoreWhatWasWritten(net::Client* c, Tier lands_in) {
  ASSERT_TRUE(c->caps().device_puts);
  ASSERT_TRUE(c->PrepareDevicePuts().ok());
  const uint64_t n = 3 * kMiB + 4096;
  for (uint64_t round = 0; round < 3; ++round) {
    DeviceBuffer buf(n + 2 * kMiB);  // freed at the end of each round
    auto bytes = Payload(40 + round, n);
    ASSERT_EQ(cudaMemcpy(static_cast<uint8_t*>(buf.get()) + kMiB, bytes.data(), n,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    for (int again = 0; again < 2; ++again) {
      const std::string key = "dev-" + std::to_string(round) + "-" + std::to_string(again);
      Status st = c->PutFromDevice("ns", key, Bf16(n), static_cast<uint8_t*>(buf.get()) + kMiB, n,
                                   again == 1);
      ASSERT_TRUE(st.ok()) << st.ToString();
      auto info = c->Lookup("ns", key);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_TRUE(info->tiers.has(lands_in));
      std::vector<uint8_t> got(n);
      ASSERT_TRUE(c->Get("ns", key, {got.data(), n}).ok());
      EXPECT_TRUE(got == bytes) << key;
    }
  }
  // From a thread that has made no CUDA call yet (an engine's saver thread, say).
  DeviceBuffer fresh(kMiB);
  fresh.Fill(50);
  Status from_thread;
  std::thread([&] {
    from_thread = c->PutFromDevice("ns", "thread", Bf16(kMiB), fresh.get(), kMiB);
  }).join();
  ASSERT_TRUE(from_thread.ok()) << from_thread.ToString();
  std::vector<uint8_t> got(kMiB);
  ASSERT_TRUE(c->Get("ns", "thread", {got.data(), kMiB}).ok());
  EXPECT_TRUE(got == fresh.Read());
  // Past the allocation's end: refused here, nothing sent.
  DeviceBuffer small(kMiB);
  Status st = c->PutFromDevice("ns", "past-end", Bf16(2 * kMiB), small.get(), 2 * kMiB);
  EXPECT_TRUE(st.IsInvalidArgument()) << st.ToString();
  EXPECT_TRUE(c->Lookup("ns", "past-end").status().IsNotFound());
}

// `ec-store serve` in a fresh directory (a device tier of `device_pool`, none where empty)
// and a client of it over shared memory; the server stopped with SIGTERM at the end.
struct ServedDaemon {
  explicit ServedDaemon(const std::string& device_pool)
      : pid(StartServer(dir.path(), device_pool)), c(ConnectUnix(dir.path())) {}
  ~ServedDaemon() {
    c.reset();
    StopProcess(pid, SIGTERM);
  }
  TempDir dir;
  pid_t pid;
  std::unique_ptr<net::Client> c;
};

TEST(DevicePut, AServerCopiesAClientsDeviceMemoryIntoItsHostPool) {
  REQUIRE_GPU();
  ServedDaemon d("");
  ASSERT_NE(d.c, nullptr);
  ExpectDevicePutsStoreWhatWasWritten(d.c.get(), Tier::kPool);
}

// Device memory the client freed (cudaFree, as PyTorch's empty_cache() does) while the
// server had it open: CUDA keeps it allocated until the server closes its mapping, which it
// does once the mapping has gone unused for DeviceImports::kIdleClose -- not when the
// connection ends -- and the connection goes on working.
TEST(DevicePut, AClientsFreedMemoryComesBackOnceTheServerLeavesItIdle) {
  REQUIRE_GPU();
  ServedDaemon d("");
  net::Client* c = d.c.get();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->PrepareDevicePuts().ok());
  DeviceBuffer warm(kMiB);  // the server's CUDA context made before the baseline is taken
  warm.Fill(60);
  ASSERT_TRUE(c->PutFromDevice("ns", "warm", Bf16(kMiB), warm.get(), kMiB).ok());
  const int64_t before = FreeDeviceBytes();
  const uint64_t big = 1024 * kMiB;
  {
    DeviceBuffer buf(big);
    buf.Fill(61);
    ASSERT_TRUE(c->PutFromDevice("ns", "big", Bf16(4 * kMiB), buf.get(), 4 * kMiB).ok());
  }  // cudaFree while the server has it open
  const int64_t pinned = before - FreeDeviceBytes();
  const auto limit = net::DeviceImports::kIdleClose + std::chrono::seconds(4);
  const int64_t back = MsUntilFreeAgain(before, big / 4, limit);
  std::printf(
      "[ measured ] freed 1 GiB the server had open: %.0f MiB still allocated at once; "
      "back after %lld ms\n",
      static_cast<double>(pinned) / kMiB, static_cast<long long>(back));
  EXPECT_GE(back, 0) << "the client's freed device memory did not come back within "
                     << limit.count() << " ms";
  // The connection is still usable, and device puts still work on it.
  warm.Fill(62);
  ASSERT_TRUE(c->PutFromDevice("ns", "after", Bf16(kMiB), warm.get(), kMiB).ok());
  std::vector<uint8_t> got(kMiB);
  ASSERT_TRUE(c->Get("ns", "after", {got.data(), kMiB}).ok());
  EXPECT_TRUE(got == warm.Read());
}

constexpr uint64_t kProducerBytes = 256 * kMiB, kProducerSlice = 4 * kMiB;

// Run as a child (EC_CHILD_DIR set): puts 4 MiB slices of a 256 MiB allocation, one after
// another, writing a byte on EC_CHILD_FD for each put acknowledged, until it is killed.
TEST(DevicePut, ProducerThatCrashes) {
  const char* dir = std::getenv("EC_CHILD_DIR");
  if (!dir) GTEST_SKIP() << "the crashing producer of DevicePut.AProducerKilled... (a child)";
  auto c = ConnectUnix(dir);
  ASSERT_NE(c, nullptr);
  DeviceBuffer buf(kProducerBytes);
  buf.Fill(70);
  const int fd = std::atoi(std::getenv("EC_CHILD_FD"));
  for (uint64_t i = 0;; ++i) {
    const uint64_t at = i % (kProducerBytes / kProducerSlice) * kProducerSlice;
    Status st = c->PutFromDevice("ns", "crash-" + std::to_string(i), Bf16(kProducerSlice),
                                 static_cast<uint8_t*>(buf.get()) + at, kProducerSlice);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(write(fd, "1", 1), 1);
  }
}

// A producer SIGKILLed while it puts from device memory: every put it was acknowledged is
// stored byte for byte, the server goes on taking device puts (its CUDA context sound), and
// the dead producer's device memory comes back (the server closed what it had opened when
// the connection died).
TEST(DevicePut, AProducerKilledMidPutLosesNothingAcknowledgedAndLeavesTheServerSound) {
  REQUIRE_GPU();
  ServedDaemon d("");
  net::Client* c = d.c.get();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->PrepareDevicePuts().ok());
  DeviceBuffer warm(kMiB);
  warm.Fill(60);
  ASSERT_TRUE(c->PutFromDevice("ns", "warm", Bf16(kMiB), warm.get(), kMiB).ok());
  const int64_t before = FreeDeviceBytes();
  int acks = -1;
  pid_t child = StartChildTest("DevicePut.ProducerThatCrashes", d.dir.path(), &acks);
  char b = 0;
  ASSERT_EQ(read(acks, &b, 1), 1) << "the producer never put";
  std::this_thread::sleep_for(std::chrono::milliseconds(40));  // more puts under way
  StopProcess(child, SIGKILL);
  uint64_t acknowledged = 1;
  while (read(acks, &b, 1) == 1) ++acknowledged;
  close(acks);
  std::printf("[ measured ] %llu device puts acknowledged before the kill\n",
              static_cast<unsigned long long>(acknowledged));
  const auto all = Payload(70, kProducerBytes);
  std::vector<uint8_t> got(kProducerSlice);
  for (uint64_t i = 0; i < acknowledged; ++i) {
    const uint64_t at = i % (kProducerBytes / kProducerSlice) * kProducerSlice;
    auto info = c->Get("ns", "crash-" + std::to_string(i), {got.data(), got.size()});
    ASSERT_TRUE(info.ok()) << "acknowledged put " << i << ": " << info.status().ToString();
    ASSERT_TRUE(std::equal(got.begin(), got.end(), all.begin() + at)) << "put " << i;
  }
  warm.Fill(61);
  ASSERT_TRUE(c->PutFromDevice("ns", "after", Bf16(kMiB), warm.get(), kMiB).ok());
  std::vector<uint8_t> after(kMiB);
  ASSERT_TRUE(c->Get("ns", "after", {after.data(), kMiB}).ok());
  EXPECT_TRUE(after == warm.Read());
  const int64_t back = MsUntilFreeAgain(before, kProducerBytes / 4, std::chrono::seconds(5));
  EXPECT_GE(back, 0) << "the killed producer's device memory did not come back within 5 s";
}

TEST(DevicePut, AServerWithADeviceTierCopiesDeviceToDevice) {
  REQUIRE_GPU();
  ServedDaemon d("32MiB");
  ASSERT_NE(d.c, nullptr);
  ExpectDevicePutsStoreWhatWasWritten(d.c.get(), Tier::kDevice);
}

// ---- PutManyFromBuffers (cache/buffer_io.h): a step's saves in one call.

// `n` items of 0.5 to 3 MiB, most sliced from one allocation (as a caching allocator hands
// out an engine's encoder outputs), every fifth in an allocation of its own; item `bad` has
// a key no store takes. Put in one call, each is answered alone: the bad one refused, the
// rest stored byte-exact and read back into device memory.
void ExpectAStepOfSavesStoresEachItem(Cache* c, size_t n, size_t bad, PutRoute route) {
  std::vector<uint64_t> sizes;
  uint64_t shared = 0;
  for (size_t i = 0; i < n; ++i) {
    sizes.push_back(kMiB / 2 + (i * 389 * 4096) % (5 * kMiB / 2));
    if (i % 5 != 0) shared += sizes.back();
  }
  DeviceBuffer slab(shared);
  std::vector<std::unique_ptr<DeviceBuffer>> own;
  std::vector<BufferPut> items;
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    uint8_t* p = static_cast<uint8_t*>(slab.get()) + at;
    if (i % 5 == 0) {
      own.push_back(std::make_unique<DeviceBuffer>(sizes[i]));
      p = static_cast<uint8_t*>(own.back()->get());
    } else {
      at += sizes[i];
    }
    ASSERT_EQ(cudaMemcpy(p, Payload(100 + i, sizes[i]).data(), sizes[i], cudaMemcpyHostToDevice),
              cudaSuccess);
    items.push_back({i == bad ? std::string("bad\nkey") : "item-" + std::to_string(i),
                     Bf16(sizes[i]), BufferDesc::Device(p, sizes[i], 0, 0)});
  }
  std::vector<PutRoute> routes;
  auto got = PutManyFromBuffers(*c, "ns", items, {.checksum_when_spilled = true}, &routes);
  ASSERT_EQ(got.size(), n);
  for (size_t i = 0; i < n; ++i) {
    if (i == bad) {
      EXPECT_TRUE(got[i].IsInvalidArgument()) << got[i].ToString();
      continue;
    }
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].ToString();
    EXPECT_EQ(routes[i], route) << i << " through " << c->transport();
    DeviceBuffer back(sizes[i]);
    auto read =
        GetIntoBuffers(*c, "ns", {items[i].key}, {BufferDesc::Device(back.get(), sizes[i], 0, 0)});
    ASSERT_TRUE(read[0].ok()) << read[0].status().ToString();
    EXPECT_TRUE(back.Read() == Payload(100 + i, sizes[i])) << items[i].key << " differs";
  }
}

TEST(DeviceBatch, AnEmbeddedStoreFillsReservedBlocksAndWaitsOnce) {
  REQUIRE_GPU();
  TempDir dir;
  auto s = Store::Open(dir.path(), WithDevice(256 * kMiB, 0));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectAStepOfSavesStoresEachItem(s->get(), 40, 7, PutRoute::kSlot);
}

TEST(DeviceBatch, AStoreWithADeviceTierTakesEachItemDeviceToDevice) {
  REQUIRE_GPU();
  TempDir dir;
  auto s = Store::Open(dir.path(), WithDevice(256 * kMiB, 192 * kMiB));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectAStepOfSavesStoresEachItem(s->get(), 12, 3, PutRoute::kCacheCopy);
}

// PUT_DEVICE_MANY: 40 items in 9 allocations, 64 MiB of them into the daemon's 64 MiB pool
// (its batches commit every quarter of the pool); then 40 allocations of their own, more
// than a connection keeps open (kMaxDeviceImports): the server waits for its copies before it
// closes one.
TEST(DeviceBatch, ASameHostDaemonTakesAStepInOneRequest) {
  REQUIRE_GPU();
  ServedDaemon d("");
  ASSERT_NE(d.c, nullptr);
  ASSERT_TRUE(d.c->caps().device_puts);
  ExpectAStepOfSavesStoresEachItem(d.c.get(), 40, 11, PutRoute::kCacheCopy);
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<DeviceSource> srcs;
  for (size_t i = 0; i < net::kMaxDeviceImports + 8; ++i) {
    bufs.push_back(std::make_unique<DeviceBuffer>(kMiB / 4));
    bufs.back()->Fill(200 + i);
    srcs.push_back({"own-" + std::to_string(i), Bf16(kMiB / 4), bufs.back()->get(), kMiB / 4});
  }
  auto got = d.c->PutManyFromDevice("ns", srcs);
  for (size_t i = 0; i < srcs.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].ToString();
    std::vector<uint8_t> back(kMiB / 4);
    ASSERT_TRUE(d.c->Get("ns", srcs[i].key, {back.data(), back.size()}).ok());
    EXPECT_TRUE(back == Payload(200 + i, kMiB / 4)) << srcs[i].key;
  }
}

TEST(DeviceBatch, ASameHostDaemonsPutArenaBlocksAreFilledTogether) {
  REQUIRE_GPU();
  TempDir dir;
  pid_t pid = StartServer(dir.path(), "");
  auto c = ConnectUnix(dir.path());
  ASSERT_NE(c, nullptr);
  const BufferPutOptions no_device_puts{.device_puts = false};
  std::vector<BufferPut> items;
  DeviceBuffer a(3 * kMiB), b(kMiB);
  a.Fill(300);
  b.Fill(301);
  items.push_back({"a", Bf16(3 * kMiB), BufferDesc::Device(a.get(), 3 * kMiB, 0, 0)});
  items.push_back({"b", Bf16(kMiB), BufferDesc::Device(b.get(), kMiB, 0, 0)});
  std::vector<PutRoute> routes;
  auto got = PutManyFromBuffers(*c, "ns", items, no_device_puts, &routes);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].ToString();
    EXPECT_EQ(routes[i], PutRoute::kSlot);
    std::vector<uint8_t> back(items[i].src.size);
    ASSERT_TRUE(c->Get("ns", items[i].key, {back.data(), back.size()}).ok());
    EXPECT_TRUE(back == Payload(300 + i, back.size()));
  }
  c.reset();
  StopProcess(pid, SIGTERM);
}

// ---- GetManyToDevice (cache/device_load.h): each copy enqueued as its bytes become readable.

constexpr uint64_t kLoadSizes[] = {12 * kMiB + 6, kMiB, 5 * kMiB + 4};  // bf16: even

void PutLoadEntries(Cache* c) {
  for (int i = 0; i < 3; ++i) {
    Status st =
        c->Put("ns", "k" + std::to_string(i), Bf16(kLoadSizes[i]), Span(Payload(i, kLoadSizes[i])));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

// k1 in the pool, k0 and k2 on disk only (the caller reopened the store): a step of them,
// an absent key, and k2 again into a buffer too small for it, each into device memory
// whose bytes past the entry must stay as they were.
void ExpectAStepLandsOnTheGpu(Cache* c) {
  ASSERT_TRUE(c->Acquire("ns", "k1").ok());  // k1 back in the pool, released at once
  const std::vector<std::string> keys{"k0", "absent", "k1", "k2", "k2"};
  const uint64_t room[] = {13 * kMiB, kMiB, 2 * kMiB, 6 * kMiB, kMiB};
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<std::span<uint8_t>> dsts;
  for (uint64_t r : room) {
    bufs.push_back(std::make_unique<DeviceBuffer>(r));
    ASSERT_EQ(cudaMemset(bufs.back()->get(), 0xEE, r), cudaSuccess);
    dsts.emplace_back(static_cast<uint8_t*>(bufs.back()->get()), r);
  }
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto got = GetManyToDevice(*c, "ns", keys, dsts, 0, reinterpret_cast<uintptr_t>(stream));
  cudaStreamDestroy(stream);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i : {0, 2, 3}) {
    const int k = keys[i][1] - '0';
    const uint64_t n = kLoadSizes[k];
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    ASSERT_EQ(got[i]->bytes, n);
    auto on_gpu = bufs[i]->Read();
    EXPECT_TRUE(std::equal(on_gpu.begin(), on_gpu.begin() + n, Payload(k, n).begin()))
        << keys[i] << ": bytes differ on the device";
    EXPECT_TRUE(std::all_of(on_gpu.begin() + n, on_gpu.end(), [](uint8_t b) { return b == 0xEE; }))
        << keys[i] << ": written past the entry";
  }
  EXPECT_TRUE(got[1].status().IsNotFound()) << got[1].status().ToString();
  EXPECT_TRUE(got[4].status().IsInvalidArgument()) << got[4].status().ToString();
  auto small = bufs[4]->Read();
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](uint8_t b) { return b == 0xEE; }))
      << "a buffer too small for its entry was written";
  EXPECT_EQ(c->Stats()->pool().promotions, 3u);  // k1's Acquire, then k0 and k2 together
}

TEST(DeviceLoad, AStepOfPoolAndDiskEntriesLandsOnTheGpuFromAnEmbeddedStore) {
  REQUIRE_GPU();
  TempDir dir;
  Options o;
  o.pool_bytes = 64 * kMiB;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    PutLoadEntries(s->get());
  }
  auto s = Store::Open(dir.path(), o);  // reopened: every entry on disk only
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectAStepLandsOnTheGpu(s->get());
  EXPECT_EQ((*s)->Stats()->leases, 0u);
}

// A step of disk entries larger than half the pool (what one batch may hold under lease) is
// loaded in rounds: every entry lands, none is refused Busy.
TEST(DeviceLoad, AStepLargerThanHalfThePoolLandsInRounds) {
  REQUIRE_GPU();
  TempDir dir;
  Options o;
  o.pool_bytes = 16 * kMiB;
  const uint64_t n = 1 * kMiB;
  const int count = 24;
  {
    auto s = Store::Open(dir.path(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (int i = 0; i < count; ++i)
      ASSERT_TRUE((*s)->Put("ns", "r" + std::to_string(i), Bf16(n), Span(Payload(i, n))).ok());
  }
  auto s = Store::Open(dir.path(), o);  // reopened: every entry on disk only
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  DeviceBuffer all(count * n);
  std::vector<std::string> keys;
  std::vector<std::span<uint8_t>> dsts;
  for (int i = 0; i < count; ++i) {
    keys.push_back("r" + std::to_string(i));
    dsts.emplace_back(static_cast<uint8_t*>(all.get()) + i * n, n);
  }
  auto got = GetManyToDevice(**s, "ns", keys, dsts, 0, 0);
  auto on_gpu = all.Read();
  for (int i = 0; i < count; ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].status().ToString();
    EXPECT_TRUE(
        std::equal(on_gpu.begin() + i * n, on_gpu.begin() + (i + 1) * n, Payload(i, n).begin()))
        << i;
  }
  EXPECT_EQ((*s)->Stats()->leases, 0u);
}

// Through a same-host daemon (GET_SHM_STREAM), its pool mapping registered with CUDA as the
// Python package registers it.
TEST(DeviceLoad, AStepOfPoolAndDiskEntriesLandsOnTheGpuThroughADaemon) {
  REQUIRE_GPU();
  TempDir dir;
  pid_t pid = StartServer(dir.path(), "");
  {
    auto c = ConnectUnix(dir.path());
    ASSERT_NE(c, nullptr);
    PutLoadEntries(c.get());
  }
  StopProcess(pid, SIGTERM);  // a clean close; started again with an empty pool
  pid = StartServer(dir.path(), "");
  auto c = ConnectUnix(dir.path());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->caps().streamed_leases);
  auto pool = c->shared_pool();
  ASSERT_EQ(
      cudaHostRegister(const_cast<uint8_t*>(pool.data()), pool.size(), cudaHostRegisterReadOnly),
      cudaSuccess);
  ExpectAStepLandsOnTheGpu(c.get());
  EXPECT_EQ(c->Stats()->client_leases, 0u);
  cudaHostUnregister(const_cast<uint8_t*>(pool.data()));
  c.reset();
  StopProcess(pid, SIGTERM);
}

// Buffer descriptors through a same-host daemon with a device tier: the put is copied by
// the daemon into its device pool, and the get reads it device->device out of that pool,
// opened over CUDA IPC, after the caller's stream; the lease ends once the copy ran.
TEST(DeviceBuffers, ASameHostDaemonsDevicePoolIsReadDeviceToDevice) {
  REQUIRE_GPU();
  ServedDaemon d("32MiB");
  net::Client* c = d.c.get();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->capabilities().device_leases);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const uint64_t n = 2867200;
  DeviceBuffer src(n), dst(n);
  src.Fill(7);
  auto desc = [&](const DeviceBuffer& b) {
    return BufferDesc::Device(b.get(), n, 0, reinterpret_cast<uintptr_t>(stream));
  };
  PutRoute way;
  ASSERT_TRUE(PutFromBuffer(*c, "ns", "k", Bf16(n), desc(src), {}, &way).ok());
  EXPECT_EQ(way, PutRoute::kCacheCopy);
  auto info = c->Lookup("ns", "k");
  ASSERT_TRUE(info.ok() && info->tiers.has(Tier::kDevice)) << "the daemon copied it to its GPU";
  const uint64_t hits = c->Stats()->of(Tier::kDevice).hits;
  auto got = GetIntoBuffers(*c, "ns", {"k", "absent"}, {desc(dst), desc(dst)});
  ASSERT_TRUE(got[0].ok()) << got[0].status().ToString();
  EXPECT_TRUE(got[1].status().IsNotFound()) << got[1].status().ToString();
  EXPECT_TRUE(dst.Read() == src.Read());
  EXPECT_EQ(c->Stats()->of(Tier::kDevice).hits, hits + 1) << "leased in the device pool";
  EXPECT_EQ(Leases(c), 0u) << "the lease ended once the copy ran";
  cudaStreamDestroy(stream);
}
#endif

}  // namespace
}  // namespace ecstore
