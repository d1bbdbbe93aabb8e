#include "store/recovery_scan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "base/mutex.h"

namespace ecstore {

// Loads every index row. Decoding SQLite rows and building entries overlap: reader threads
// hand batches of rows over. A large index is read from both ends at once, each reader
// claiming rows until all `count` are claimed: with nothing written to the index meanwhile
// (the dropped rows' deletes wait until both are done), the two runs of keys are disjoint and
// together every row. At 1 M rows SQLite's decoding on one thread is most of the open.
Status RecoveryScan::LoadIndex(const std::vector<uint32_t>& segs) {
  auto count = index_->Count();
  if (!count.ok()) return count.status();
  owner_->RecoveryExpects(*count);
  const int readers = *count >= kBothEndsRows && index_->CanReadFromBothEnds() ? 2 : 1;
  Mutex qmu;
  CondVar qcv;
  std::deque<std::vector<IndexRow>> batches;
  int readers_done = 0;
  Status read_status;
  std::atomic<uint64_t> claimed{0};
  auto read = [&](bool from_the_end) {
    std::vector<IndexRow> batch;
    auto hand_over = [&] {
      MutexLock ql(&qmu);
      batches.push_back(std::exchange(batch, {}));
      qcv.NotifyOne();
    };
    Status st = index_->ForEachInOrder(from_the_end, [&](IndexRow&& row) {
      if (readers == 2 && claimed.fetch_add(1, std::memory_order_relaxed) >= *count) return false;
      batch.push_back(std::move(row));
      if (batch.size() == 4096) hand_over();
      return true;
    });
    hand_over();
    if (from_the_end && st.IsUnavailable()) {  // it read nothing: the first reader reads all
      spdlog::warn("{}; reading the index from one end", st.message());
      st = Status::Ok();
    }
    MutexLock ql(&qmu);
    if (read_status.ok()) read_status = st;
    ++readers_done;
    qcv.NotifyOne();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < readers; ++r) threads.emplace_back(read, r == 1);
  std::vector<IndexRow> dropped;
  for (;;) {
    std::vector<IndexRow> batch;
    {
      UniqueLock ql(&qmu);
      while (!(readers_done == readers || !batches.empty())) qcv.Wait(ql);
      if (batches.empty()) break;
      batch = std::move(batches.front());
      batches.pop_front();
    }
    for (IndexRow& row : batch) {
      if (!std::binary_search(segs.begin(), segs.end(), row.loc.segment)) {
        dropped.push_back(std::move(row));
        continue;
      }
      max_seq_ = std::max(max_seq_, row.seq);
      owner_->Recovered(std::move(row));
    }
  }
  for (std::thread& t : threads) t.join();
  for (IndexRow& row : dropped) {
    spdlog::warn("index entry {}/{} points at missing segment {}; dropped", row.ns, row.key,
                 row.loc.segment);
    index_->EnqueueDelete(std::move(row.ns), std::move(row.key), row.seq);
  }
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
