#include "store/verify.h"

#include <optional>
#include <string>
#include <vector>

#include "disk/aligned_buffer.h"
#include "disk/record.h"

namespace ecstore {
namespace {

// Checks one entry's pool and disk copies. A corrupt copy is dropped and reported in
// report->corrupt; what keeps a check from finishing (a failing device) is returned.
Status VerifyEntry(Keydir* kd, const EntryPtr& e, VerifyReport* report) {
  std::optional<Keydir::Copies> copies = kd->CopiesOf(e);
  if (!copies) return Status::Ok();  // erased since
  ++report->checked;
  report->bytes += e->bytes;
  const std::string name = e->ns + "/" + e->key + ": ";
  std::optional<ReadLease>& lease = copies->pool;
  // Not yet checksummed (put from device memory, never spilled): nothing to check against.
  const bool pool_good = lease && (!copies->checksummed ||
                                   PayloadChecksum(lease->data(), lease->size()) == e->checksum);
  Status bad;
  if (lease && !pool_good) bad = Status::Corruption("pool copy checksum mismatch");
  lease.reset();
  const std::optional<DiskLocation>& loc = copies->disk;
  if (bad.ok() && loc) {
    AlignedBuffer buf(e->bytes);
    bool stale_row = false;
    bad = kd->durable().Read(*e, *loc, buf.data(), buf.size(), &stale_row);
    if (stale_row) {
      Status fixed = kd->FixStaleRow(e, *loc, bad);
      std::optional<Keydir::Copies> now = kd->CopiesOf(e);
      if (now) now->pool.reset();
      if (!fixed.ok() || !now || !now->disk) return fixed;
      bad = kd->durable().Read(*e, *now->disk, buf.data(), buf.size(),
                               &stale_row);  // the record it found
      if (!bad.ok()) return bad;
    }
  }
  if (bad.ok()) return Status::Ok();
  if (!bad.IsCorruption())  // the device failed, not the data: report and keep it
    return Status::IOError(bad.ToString());
  if (pool_good) {  // only the disk copy is bad: drop it; the pool copy is spilled again
    kd->DropDiskCopy(e, *loc);
    report->corrupt.push_back(name + bad.message() + " (disk copy dropped, pool copy kept)");
    return Status::Ok();
  }
  kd->DropCorrupt(e, bad);
  report->corrupt.push_back(name + bad.message());
  return Status::Ok();
}

}  // namespace

Result<VerifyReport> VerifyStore(Keydir* kd,
                                 const std::function<void(uint64_t, uint64_t)>& progress) {
  std::vector<KeydirSlot> all = kd->Snapshot();
  VerifyReport report;
  uint64_t done = 0;
  for (const KeydirSlot& s : all) {
    if (progress) progress(done, all.size());
    ++done;
    EntryPtr e = kd->EntryForPass(s);
    if (!e) continue;  // erased since
    Status st = VerifyEntry(kd, e, &report);
    if (!st.ok()) report.errors.push_back(e->ns + "/" + e->key + ": " + st.message());
  }
  // Headers too: a damaged header hides its record from a rebuild of the index.
  kd->durable().VerifyHeaders(&report.corrupt, &report.errors);
  if (progress) progress(all.size(), all.size());
  return report;
}

}  // namespace ecstore
