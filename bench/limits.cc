// The machine's own limits: what the workloads' ratios are against.
#include <fcntl.h>

#include <cstring>
#include <filesystem>

#include "base/env.h"
#include "bench/fio.h"
#include "bench/pinned_buffer.h"
#include "bench/results.h"
#include "bench/workloads.h"
#include "disk/io_queue.h"

namespace ecstore::bench {

void MeasureMemcpy(const Config& cfg) {
  Progress("limit: single-thread memcpy");
  const size_t n = 64 * kMiB;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  int reps = cfg.quick ? 16 : 48;
  std::memcpy(b.data(), a.data(), n);
  Latencies lat;
  auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    std::memcpy(i % 2 ? a.data() : b.data(), i % 2 ? b.data() : a.data(), n);
    lat.Add(t);
  }
  double secs = Since(t0);
  Add({"memcpy", "limit", n * reps / secs / 1e9, reps / secs, lat.P(0.5), lat.P(0.99), -1,
       "64 MiB buffers"});
}

void MeasureDisk(const Config& cfg) {
  Progress("limit: raw O_DIRECT disk write/read (io_uring, QD32, 1 MiB)");
  std::filesystem::create_directories(cfg.dir);
  std::string path = cfg.dir + "/raw-disk-probe";
  auto fd = Env::Default()->OpenFile(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  Die(fd.status(), "open probe");
  auto io = IoService::Start(Env::Default(), 32, kMiB);  // the store's depth and chunk
  Die(io.status(), "io_uring");
  const uint64_t total = cfg.quick ? 1 * kGiB : 4 * kGiB, req = 64 * kMiB;
  // Preallocated, as the store's segments are (and as fio lays out its file): writes that
  // extend a file are a different, slower operation on ext4.
  Die(Env::Default()->Preallocate(fd->get(), total), "preallocate probe");
  PinnedBuffer buf(req);  // the pool's kind of memory, as the store's reads and writes use
  auto e = Embedding(req / 2, 99);
  std::memcpy(buf.data(), e.data(), req);
  auto run = [&](IoOp op) {
    Latencies lat;
    auto t0 = Clock::now();
    for (uint64_t off = 0; off < total; off += req) {
      auto t = Clock::now();
      Die((*io)->Run({{op, fd->get(), buf.data(), req, off, 0}}), "raw io");
      lat.Add(t);
    }
    if (op == IoOp::kWrite) Die((*io)->Run({{IoOp::kSync, fd->get(), nullptr, 0, 0, 0}}), "sync");
    double secs = Since(t0);
    Add({op == IoOp::kWrite ? "disk_write" : "disk_read", "limit", total / secs / 1e9,
         total / req / secs, lat.P(0.5), lat.P(0.99), -1,
         "O_DIRECT sequential into a preallocated file, 64 MiB requests split 1 MiB x QD32, "
         "to and from pinned huge-page memory as the pool is"});
  };
  run(IoOp::kWrite);
  run(IoOp::kRead);
  std::filesystem::remove(path);
  // The same transfers by fio: a probe that reads low would flatter every ratio against it.
  for (bool write : {true, false}) {
    Progress(std::string("limit: fio ") + (write ? "write" : "read"));
    std::string why;
    auto f = RunFio(path, write, total, &why);
    const char* w = write ? "disk_write" : "disk_read";
    if (f)
      Add({w, "fio", f->gbps, f->gbps * 1e9 / kMiB, f->p50_us, f->p99_us, -1,
           "fio: O_DIRECT io_uring, 1 MiB x QD32, same directory; latency per 1 MiB request"});
    else if (!Find(w, "fio"))
      std::fprintf(stderr, "\nno fio limit: %s\n", why.c_str());
  }
  std::filesystem::remove(path);
}

}  // namespace ecstore::bench
