// Index: the durable SQLite index of the disk tier (WAL mode, versioned schema with
// migrations). One writer thread batches every change into transactions; Flush() waits
// until everything enqueued so far is committed.
// Thread rules: Enqueue*/Flush from any thread. LoadAll/ForEach*/SegmentTails/Reset before
// the store starts serving (they use the connection the writer thread owns afterwards, under
// the same mutex); ForEachInOrder from the end opens a read-only connection of its own for
// the call, so it may run beside one from the start on another thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "base/entry_record.h"
#include "base/env.h"
#include "base/log_limiter.h"
#include "base/mutex.h"
#include "base/status.h"
#include "base/tensor_meta.h"
#include "disk/record.h"

struct sqlite3;

namespace ecstore {

// An index row: an entry's record and where on disk its bytes are.
struct IndexRow : EntryRecord {
  DiskLocation loc;
  IndexRow() = default;
  IndexRow(EntryRecord rec, const DiskLocation& at) : EntryRecord(std::move(rec)), loc(at) {}
};

class Index {
 public:
  static constexpr int kSchemaVersion = 2;
  // read_only: for a store on a full disk; reads work, Enqueue* are dropped.
  // env: its BeforeIndexCommit fault point is consulted before each commit.
  static Result<std::unique_ptr<Index>> Open(const std::string& path, bool read_only = false,
                                             Env* env = Env::Default());
  // Opens the index; a damaged file (or, with `check`, one failing quick_check) is moved
  // aside -- never deleted -- and a fresh one made: the segments are the source of truth,
  // so *damaged tells the caller to rebuild the rows from them. Read-only: opened as is, and
  // *damaged when it cannot be read without writing (an empty one in memory stands in).
  static Result<std::unique_ptr<Index>> OpenOrReplace(const std::string& path, Env* env,
                                                      bool read_only, bool check, bool* damaged);
  // Renames the file (and its -wal, -shm) to <path>.broken-<time>, saying why in the log.
  static Status SetAside(const std::string& path, Env* env, const Status& why);
  ~Index();

  Result<std::vector<IndexRow>> LoadAll();
  // Streams every row to fn (in no particular order) without holding them all.
  Status ForEach(const std::function<void(IndexRow&&)>& fn);
  // Streams the rows in key order, from the first or (from_the_end) from the last, until fn
  // returns false. From the end it reads over a connection of its own, so two threads can
  // read the two ends at once (a recovery's load: SQLite decodes ~1 M rows/s a thread).
  Status ForEachInOrder(bool from_the_end, const std::function<bool(IndexRow&&)>& fn);
  // Whether ForEachInOrder can read from the end: not for an index held in memory.
  bool CanReadFromBothEnds() const { return !reader_uri_.empty(); }
  // Read-only, and the file was missing or unreadable without writing: an empty index in
  // memory stands in, and the entries must be read from the segment files.
  bool stands_in() const { return stands_in_; }
  Result<uint64_t> Count();
  Result<std::map<uint32_t, uint64_t>> SegmentTails();  // segment -> bytes indexed
  Status Reset();                                       // drop every row (before a rebuild)
  // SQLite's quick_check over every page: Corruption when the file is damaged.
  Status Check();
  int schema_version() const { return version_; }

  void EnqueuePut(IndexRow row);
  // Deletes the row only while it still holds version `seq` (a newer put survives).
  void EnqueueDelete(std::string ns, std::string key, uint64_t seq);
  void EnqueueTouch(std::string ns, std::string key, uint64_t last_access_us, uint64_t hits);
  void EnqueueTail(uint32_t segment, uint64_t tail);
  void EnqueueDropSegment(uint32_t segment);
  // Waits until every op enqueued before the call has been tried; Ok when all are committed,
  // else the commit's error (the ops are kept and retried in order: nothing is dropped, and
  // a later Flush is Ok once they commit).
  Status Flush();

 private:
  struct Delete {
    std::string ns, key;
    uint64_t seq;
  };
  struct Touch {
    std::string ns, key;
    uint64_t last_access_us, hits;
  };
  struct Tail {
    uint32_t segment;
    uint64_t tail;
  };
  struct DropSegment {
    uint32_t segment;
  };
  using Op = std::variant<IndexRow, Delete, Touch, Tail, DropSegment>;

  Index() = default;
  static Result<std::unique_ptr<Index>> OpenReadOnly(const std::string& path,
                                                     std::unique_ptr<Index> idx);
  Status Migrate() REQUIRES(db_mu_);
  Status Exec(const char* sql) REQUIRES(db_mu_);
  Status Apply(const std::vector<Op>& ops);
  void Enqueue(Op op);
  void WriterLoop();

  Env* env_ = Env::Default();
  sqlite3* db_ GUARDED_BY(db_mu_) = nullptr;
  std::string reader_uri_;  // how a second, read-only connection opens the file
  int reader_flags_ = 0;
  int version_ = 0;
  bool read_only_ = false;
  bool stands_in_ = false;
  Mutex db_mu_;  // the connection
  Mutex mu_;     // the queue
  CondVar cv_;
  CondVar committed_cv_;
  std::deque<Op> queue_ GUARDED_BY(mu_);
  uint64_t enqueued_ GUARDED_BY(mu_) = 0;
  // Ops the writer has tried to commit (committed or not).
  uint64_t attempted_ GUARDED_BY(mu_) = 0;
  uint64_t committed_ GUARDED_BY(mu_) = 0;  // ops committed: a prefix of those enqueued
  // A Flush waits: retry a failed batch without backing off.
  bool retry_now_ GUARDED_BY(mu_) = false;
  Status last_error_ GUARDED_BY(mu_);  // of the latest commit: Ok once a retry succeeds
  LogLimiter error_log_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace ecstore
