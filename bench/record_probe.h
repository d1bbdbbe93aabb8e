// The fair limit of one-at-a-time disk gets: the store's own records -- the very blocks its
// gets read (a 4 KiB header block and the payload in whole blocks) -- found by walking its
// segment files' self-describing headers, each read with one O_DIRECT request through an
// IoService of the store's depth and piece size, into whatever memory the caller names (the
// bench names huge pages, as the pool's). No lookup, no checksum, nothing else. The walk
// stops at a segment's first undecodable header (the preallocated tail); a damaged store
// is DiskTier::Scan's business, not a bench's. Reading the same blocks matters on a virtual disk:
// two files written minutes apart can read up to 2x apart on a virtual disk (fio over each), so
// a probe of its own file would measure the disk's layout as much as the store.
//
//   auto probe = RecordReadProbe::Open(store_dir, "bench", keys);   // store open or closed
//   double secs = (*probe)->Read(i, dst);                           // keys[i]'s record
//
// Thread rules: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "disk/io_queue.h"

namespace ecstore::bench {

class RecordReadProbe {
 public:
  // Finds the newest record of each of `keys` (in namespace `ns`) in the segments under
  // `store_dir`; NotFound names a key without one.
  static Result<std::unique_ptr<RecordReadProbe>> Open(const std::string& store_dir,
                                                       const std::string& ns,
                                                       const std::vector<std::string>& keys);

  // Reads keys[i]'s whole record into dst (block-aligned, at least the record's length);
  // returns the seconds the read took.
  Result<double> Read(size_t i, std::span<uint8_t> dst);
  // Reads the records of keys[which[k]] into dsts[k], all in flight together (one batch);
  // returns the seconds the batch took.
  Result<double> ReadMany(std::span<const size_t> which, std::span<const std::span<uint8_t>> dsts);

 private:
  struct Where {
    int fd;
    uint64_t offset, len, seq;
  };
  std::vector<UniqueFd> segments_;
  std::vector<Where> at_;
  std::unique_ptr<IoService> io_;
};

}  // namespace ecstore::bench
