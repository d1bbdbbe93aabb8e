#include "store/recovery_scan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace ecstore {

// Loads every index row. Decoding SQLite rows and building entries overlap: a reader thread
// hands batches of rows over.
Status RecoveryScan::LoadIndex(const std::vector<uint32_t>& segs) {
  auto count = index_->Count();
  if (!count.ok()) return count.status();
  owner_->RecoveryExpects(*count);
  std::mutex qmu;
  std::condition_variable qcv;
  std::deque<std::vector<IndexRow>> batches;
  bool reader_done = false;
  Status read_status;
  std::thread reader([&] {
    std::vector<IndexRow> batch;
    auto hand_over = [&] {
      std::lock_guard<std::mutex> ql(qmu);
      batches.push_back(std::exchange(batch, {}));
      qcv.notify_one();
    };
    Status st = index_->ForEach([&](IndexRow&& row) {
      batch.push_back(std::move(row));
      if (batch.size() == 4096) hand_over();
    });
    hand_over();
    std::lock_guard<std::mutex> ql(qmu);
    read_status = st;
    reader_done = true;
    qcv.notify_one();
  });
  for (;;) {
    std::vector<IndexRow> batch;
    {
      std::unique_lock<std::mutex> ql(qmu);
      qcv.wait(ql, [&] { return reader_done || !batches.empty(); });
      if (batches.empty()) break;
      batch = std::move(batches.front());
      batches.pop_front();
    }
    for (IndexRow& row : batch) {
      if (!std::binary_search(segs.begin(), segs.end(), row.loc.segment)) {
        spdlog::warn("index entry {}/{} points at missing segment {}; dropped", row.ns, row.key,
                     row.loc.segment);
        index_->EnqueueDelete(row.ns, row.key, row.seq);
        continue;
      }
      max_seq_ = std::max(max_seq_, row.seq);
      owner_->Recovered(std::move(row));
    }
  }
  reader.join();
  return read_status;
}

// Records past a segment's indexed tail were written but not yet indexed when the store last
// stopped: index them now, applying tombstones. A torn tail (a crash mid-write) is cut off.
Status RecoveryScan::ScanTail(uint32_t seg, uint64_t from, bool rebuild) {
  uint64_t corrupt = 0;
  auto scan =
      disk_->Scan(seg, from, true, [&](const RecordInfo& info, const DiskLocation& loc, bool ok) {
        max_seq_ = std::max({max_seq_, info.seq, info.target_seq});
        if (info.tombstone()) {
          uint64_t& t = tomb_targets_[info.ns + '\0' + info.key];
          t = std::max(t, info.target_seq);
          owner_->RecoveredTombstone(info.ns, info.key, info.target_seq);
          index_->EnqueueDelete(info.ns, info.key, info.target_seq);
          return;
        }
        if (!ok) {
          ++corrupt;
          spdlog::error("segment {} offset {}: record {}/{} fails its checksum; not indexed", seg,
                        loc.offset, info.ns, info.key);
          return;
        }
        auto tomb = tomb_targets_.find(info.ns + '\0' + info.key);
        if (tomb != tomb_targets_.end() && info.seq <= tomb->second) return;
        if (owner_->RecoveredSeq(info.ns, info.key) > info.seq) return;
        IndexRow row(info.entry(), loc);
        index_->EnqueuePut(row);
        owner_->Recovered(std::move(row));
      });
  if (!scan.ok()) return scan.status();
  corrupt_ += corrupt + scan->bad_headers;
  if (scan->torn_tail && !rebuild && !read_only_) {
    spdlog::warn(
        "segment {}: cutting what follows its last whole record at offset {} (preallocated "
        "space, or a write that was interrupted)",
        seg, scan->end);
    EC_RETURN_IF_ERROR(disk_->TruncateSegment(seg, scan->end));
  }
  tail_clean_ = !scan->torn_tail || !rebuild;
  index_->EnqueueTail(seg, scan->end);
  return Status::Ok();
}

}  // namespace ecstore
