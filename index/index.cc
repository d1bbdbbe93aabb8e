#include "index/index.h"

#include <spdlog/spdlog.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/mutex.h"

namespace ecstore {
namespace {

// Each step moves the schema from version i to i+1. Never edit a step; append one.
const char* const kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE entries(ns TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL,"
    " segment INTEGER NOT NULL, offset INTEGER NOT NULL, stored_len INTEGER NOT NULL,"
    " codec INTEGER NOT NULL, raw_len INTEGER NOT NULL, checksum INTEGER NOT NULL,"
    " dtype INTEGER NOT NULL, shape TEXT NOT NULL, created_us INTEGER NOT NULL,"
    " last_access_us INTEGER NOT NULL, hits INTEGER NOT NULL, PRIMARY KEY(ns, key))"
    " WITHOUT ROWID;"
    "CREATE TABLE segments(id INTEGER PRIMARY KEY, tail INTEGER NOT NULL);",
    // 1 -> 2: recompute-cost hints for value-aware eviction; per-segment lookups for compaction
    "ALTER TABLE entries ADD COLUMN recompute_cost REAL NOT NULL DEFAULT 0;"
    "CREATE INDEX entries_by_segment ON entries(segment);",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == Index::kSchemaVersion);

// A damaged database file is Corruption (the store then sets it aside and rebuilds the
// index from the segments); anything else is an I/O error.
Status SqlStatus(int rc, const std::string& msg) {
  int primary = rc & 0xff;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return Status::Corruption(msg);
  if (primary == SQLITE_FULL) return Status::NoSpace(msg + " (disk full)");
  return Status::IOError(msg);
}

Status SqlError(sqlite3* db, const std::string& what) {
  return SqlStatus(sqlite3_extended_errcode(db), "index " + what + ": " + sqlite3_errmsg(db));
}

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  sqlite3_stmt* get() { return s_; }
  bool ok() const { return s_ != nullptr; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

#define EC_SELECT_ROWS                                                                        \
  "SELECT ns, key, seq, segment, offset, stored_len, codec, raw_len, checksum, dtype, shape," \
  " created_us, last_access_us, hits, recompute_cost FROM entries"
constexpr const char* kSelectRows = EC_SELECT_ROWS;
// The primary key's order, either way: a scan of its b-tree, no sort (EXPLAIN QUERY PLAN:
// SCAN entries).
constexpr const char* kSelectRowsAscending = EC_SELECT_ROWS " ORDER BY ns, key";
constexpr const char* kSelectRowsDescending = EC_SELECT_ROWS " ORDER BY ns DESC, key DESC";
#undef EC_SELECT_ROWS

IndexRow RowOf(sqlite3_stmt* s) {
  IndexRow r;
  r.ns.assign(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
              static_cast<size_t>(sqlite3_column_bytes(s, 0)));
  r.key.assign(reinterpret_cast<const char*>(sqlite3_column_text(s, 1)),
               static_cast<size_t>(sqlite3_column_bytes(s, 1)));
  r.seq = static_cast<uint64_t>(sqlite3_column_int64(s, 2));
  r.loc.segment = static_cast<uint32_t>(sqlite3_column_int64(s, 3));
  r.loc.offset = static_cast<uint64_t>(sqlite3_column_int64(s, 4));
  r.loc.stored_len = static_cast<uint64_t>(sqlite3_column_int64(s, 5));
  r.loc.codec = static_cast<Codec>(sqlite3_column_int(s, 6));
  r.bytes = static_cast<uint64_t>(sqlite3_column_int64(s, 7));
  r.checksum = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
  r.meta.dtype = static_cast<DType>(sqlite3_column_int(s, 9));
  const char* shape = reinterpret_cast<const char*>(sqlite3_column_text(s, 10));
  if (shape && *shape) {
    auto parsed = ParseShape(shape);
    if (parsed.ok()) r.meta.shape = std::move(parsed).value();
  }
  r.created_us = static_cast<uint64_t>(sqlite3_column_int64(s, 11));
  r.last_access_us = static_cast<uint64_t>(sqlite3_column_int64(s, 12));
  r.hits = static_cast<uint64_t>(sqlite3_column_int64(s, 13));
  r.meta.recompute_cost = sqlite3_column_double(s, 14);
  return r;
}

// Steps `sql` (one of the selects above) over db, each row to fn until it returns false.
Status Scan(sqlite3* db, const char* sql, const std::function<bool(IndexRow&&)>& fn) {
  Stmt q(db, sql);
  if (!q.ok()) return SqlError(db, "load");
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW)
    if (!fn(RowOf(q.get()))) return Status::Ok();
  if (rc != SQLITE_DONE) return SqlError(db, "load");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Index>> Index::Open(const std::string& path, bool read_only, Env* env) {
  std::unique_ptr<Index> idx(new Index());
  idx->env_ = env;
  idx->read_only_ = read_only;
  if (read_only) return OpenReadOnly(path, std::move(idx));
  MutexLock l(&idx->db_mu_);  // no other thread sees idx yet; the analysis wants it held
  idx->reader_uri_ = path;
  idx->reader_flags_ = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
  int rc =
      sqlite3_open_v2(path.c_str(), &idx->db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = Status::IOError("cannot open index " + path + ": " +
                                (idx->db_ ? sqlite3_errmsg(idx->db_) : "out of memory") +
                                " (check the directory's permissions)");
    return st;
  }
  sqlite3_busy_timeout(idx->db_, 5000);
  EC_RETURN_IF_ERROR(idx->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"));
  EC_RETURN_IF_ERROR(idx->Migrate());
  idx->writer_ = std::thread([p = idx.get()] { p->WriterLoop(); });
  return idx;
}

Result<std::unique_ptr<Index>> Index::OpenOrReplace(const std::string& path, Env* env,
                                                    bool read_only, bool check, bool* damaged) {
  // Read-only: nothing set aside or rebuilt on disk; a missing index is rebuilt in memory.
  if (read_only) {
    auto index = Index::Open(path, true, env);
    if (index.ok() && (*index)->stands_in() && env->FileExists(path)) *damaged = true;
    return index;
  }
  auto index = Index::Open(path, false, env);
  Status bad = index.ok() ? Status::Ok() : index.status();
  if (index.ok() && check) {
    bad = (*index)->Check();
    if (bad.IsCorruption()) index = Status::Corruption(bad.message());
  }
  if (!bad.ok() && !bad.IsCorruption()) return bad;
  if (bad.IsCorruption()) {
    EC_RETURN_IF_ERROR(SetAside(path, env, bad));
    index = Index::Open(path, false, env);
    *damaged = true;
  }
  return index;
}

Status Index::SetAside(const std::string& path, Env* env, const Status& why) {
  const std::string aside = path + ".broken-" + std::to_string(env->NowMicros() / 1000000);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::string from = path + suffix;
    if (!env->FileExists(from)) continue;
    Status st = env->RenameFile(from, aside + suffix);
    if (!st.ok())
      return Status::IOError("index " + path + " is damaged (" + why.message() +
                             ") and could not be moved aside: " + st.message() +
                             "; move it away by hand and open again");
  }
  spdlog::warn(
      "index {} is damaged ({}); moved it to {} and rebuilding the index from the "
      "segment files (entries keep their data; access statistics restart)",
      path, why.message(), aside);
  return Status::Ok();
}

// Read-only (a full disk, or asked): mode=ro reads what the WAL holds too (a crash leaves
// committed changes there, a young store's whole schema included); it needs the -shm file,
// which a full disk may not let SQLite create, and then the file alone is read (immutable).
// What neither can read is left alone and stood in for by an empty index in memory, which the
// caller fills from the segment files (stands_in()).
Result<std::unique_ptr<Index>> Index::OpenReadOnly(const std::string& path,
                                                   std::unique_ptr<Index> idx) {
  MutexLock l(&idx->db_mu_);  // no other thread sees idx yet; the analysis wants it held
  std::string why = "no index file";
  if (::access(path.c_str(), F_OK) == 0) {
    for (const char* how : {"?mode=ro", "?immutable=1"}) {
      const std::string uri = "file:" + path + how;
      const int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
      sqlite3* db = nullptr;
      int version = -1;
      if (sqlite3_open_v2(uri.c_str(), &db, flags, nullptr) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        Stmt q(db, "PRAGMA user_version");
        if (q.ok() && sqlite3_step(q.get()) == SQLITE_ROW) version = sqlite3_column_int(q.get(), 0);
      }
      if (version == kSchemaVersion) {
        idx->db_ = db;
        idx->reader_uri_ = uri, idx->reader_flags_ = flags;
        idx->version_ = version;
        return idx;
      }
      why = version < 0 ? std::string(db ? sqlite3_errmsg(db) : "out of memory")
                        : "schema version " + std::to_string(version);
      sqlite3_close(db);
    }
    spdlog::warn(
        "index {} cannot be read without writing to its disk ({}); reading the entries from "
        "the segment files into memory instead",
        path, why);
  }
  idx->stands_in_ = true;
  if (sqlite3_open_v2(":memory:", &idx->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK)
    return SqlError(idx->db_, "open in memory");
  EC_RETURN_IF_ERROR(idx->Migrate());
  return idx;
}

Index::~Index() {
  Flush();
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (writer_.joinable()) writer_.join();
  MutexLock l(&db_mu_);
  sqlite3_close(db_);
}

Status Index::Exec(const char* sql) {
  char* err = nullptr;
  if (int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err); rc != SQLITE_OK) {
    Status st = SqlStatus(rc, std::string("index: ") + (err ? err : "error") + " in: " + sql);
    sqlite3_free(err);
    return st;
  }
  return Status::Ok();
}

Status Index::Migrate() {
  Stmt q(db_, "PRAGMA user_version");
  if (!q.ok() || sqlite3_step(q.get()) != SQLITE_ROW) return SqlError(db_, "read version");
  version_ = sqlite3_column_int(q.get(), 0);
  if (version_ > kSchemaVersion)
    return Status::InvalidArgument("index schema version " + std::to_string(version_) +
                                   " is newer than this build understands (" +
                                   std::to_string(kSchemaVersion) + "); upgrade ec-store");
  while (version_ < kSchemaVersion) {
    EC_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = Exec(kMigrations[version_]);
    std::string bump = "PRAGMA user_version=" + std::to_string(version_ + 1);
    if (st.ok()) st = Exec(bump.c_str());
    if (!st.ok()) {
      Exec("ROLLBACK");
      return st;
    }
    EC_RETURN_IF_ERROR(Exec("COMMIT"));
    ++version_;
  }
  return Status::Ok();
}

Result<std::vector<IndexRow>> Index::LoadAll() {
  std::vector<IndexRow> rows;
  EC_RETURN_IF_ERROR(ForEach([&](IndexRow&& r) { rows.push_back(std::move(r)); }));
  std::sort(rows.begin(), rows.end(), [](const IndexRow& a, const IndexRow& b) {
    return a.last_access_us < b.last_access_us;
  });
  return rows;
}

Result<uint64_t> Index::Count() {
  MutexLock l(&db_mu_);
  Stmt q(db_, "SELECT count(*) FROM entries");
  if (!q.ok() || sqlite3_step(q.get()) != SQLITE_ROW) return SqlError(db_, "count");
  return static_cast<uint64_t>(sqlite3_column_int64(q.get(), 0));
}

Status Index::ForEach(const std::function<void(IndexRow&&)>& fn) {
  MutexLock l(&db_mu_);
  return Scan(db_, kSelectRows, [&](IndexRow&& r) {
    fn(std::move(r));
    return true;
  });
}

Status Index::ForEachInOrder(bool from_the_end, const std::function<bool(IndexRow&&)>& fn) {
  if (!from_the_end) {
    MutexLock l(&db_mu_);
    return Scan(db_, kSelectRowsAscending, fn);
  }
  if (!CanReadFromBothEnds())
    return Status::InvalidArgument("an index in memory has one connection: read it from the start");
  // A connection of its own, so that this end is read while the other is. Unavailable when
  // it cannot be opened (nothing read).
  sqlite3* db = nullptr;
  Status st;
  if (sqlite3_open_v2(reader_uri_.c_str(), &db, reader_flags_, nullptr) != SQLITE_OK) {
    st = Status::Unavailable(std::string("index: cannot open a second reader: ") +
                             (db ? sqlite3_errmsg(db) : "out of memory"));
  } else {
    sqlite3_busy_timeout(db, 5000);
    st = Scan(db, kSelectRowsDescending, fn);
  }
  sqlite3_close(db);
  return st;
}

Result<std::map<uint32_t, uint64_t>> Index::SegmentTails() {
  MutexLock l(&db_mu_);
  Stmt q(db_, "SELECT id, tail FROM segments");
  if (!q.ok()) return SqlError(db_, "load segments");
  std::map<uint32_t, uint64_t> tails;
  int rc;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW)
    tails[static_cast<uint32_t>(sqlite3_column_int64(q.get(), 0))] =
        static_cast<uint64_t>(sqlite3_column_int64(q.get(), 1));
  if (rc != SQLITE_DONE) return SqlError(db_, "load segments");
  return tails;
}

Status Index::Check() {
  MutexLock l(&db_mu_);
  Stmt q(db_, "PRAGMA quick_check(1)");
  if (!q.ok()) return SqlError(db_, "check");
  int rc = sqlite3_step(q.get());
  if (rc != SQLITE_ROW) return SqlError(db_, "check");
  std::string verdict = reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 0));
  if (verdict != "ok") return Status::Corruption("index check: " + verdict);
  return Status::Ok();
}

Status Index::Reset() {
  Flush();
  MutexLock l(&db_mu_);
  return Exec("BEGIN IMMEDIATE; DELETE FROM entries; DELETE FROM segments; COMMIT;");
}

void Index::Enqueue(Op op) {
  if (read_only_) return;  // a read-only store changes nothing on disk
  {
    MutexLock l(&mu_);
    queue_.push_back(std::move(op));
    ++enqueued_;
  }
  cv_.NotifyOne();
}

void Index::EnqueuePut(IndexRow row) { Enqueue(std::move(row)); }
void Index::EnqueueDelete(std::string ns, std::string key, uint64_t seq) {
  Enqueue(Delete{std::move(ns), std::move(key), seq});
}
void Index::EnqueueTouch(std::string ns, std::string key, uint64_t t, uint64_t hits) {
  Enqueue(Touch{std::move(ns), std::move(key), t, hits});
}
void Index::EnqueueTail(uint32_t segment, uint64_t tail) { Enqueue(Tail{segment, tail}); }
void Index::EnqueueDropSegment(uint32_t segment) { Enqueue(DropSegment{segment}); }

Status Index::Flush() {
  UniqueLock l(&mu_);
  const uint64_t target = enqueued_;
  retry_now_ = true;
  cv_.NotifyOne();  // a batch waiting to be retried is tried now, not after its back-off
  while (!(attempted_ >= target || stop_)) committed_cv_.Wait(l);
  if (committed_ >= target) return Status::Ok();
  return last_error_.ok() ? Status::IOError("index closed with changes not written") : last_error_;
}

Status Index::Apply(const std::vector<Op>& ops) {
  MutexLock l(&db_mu_);
  EC_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Stmt put(db_,
           "INSERT OR REPLACE INTO entries(ns, key, seq, segment, offset, stored_len, codec,"
           " raw_len, checksum, dtype, shape, created_us, last_access_us, hits, recompute_cost)"
           " VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  Stmt del(db_, "DELETE FROM entries WHERE ns=? AND key=? AND seq<=?");
  Stmt touch(db_, "UPDATE entries SET last_access_us=?, hits=? WHERE ns=? AND key=?");
  Stmt tail(db_, "INSERT OR REPLACE INTO segments(id, tail) VALUES(?,?)");
  Stmt drop(db_, "DELETE FROM segments WHERE id=?");
  Stmt drop_rows(db_, "DELETE FROM entries WHERE segment=?");
  if (!put.ok() || !del.ok() || !touch.ok() || !tail.ok() || !drop.ok() || !drop_rows.ok()) {
    Exec("ROLLBACK");
    return SqlError(db_, "prepare");
  }
  auto text = [](sqlite3_stmt* s, int i, const std::string& v) {
    sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  auto i64 = [](sqlite3_stmt* s, int i, uint64_t v) {
    sqlite3_bind_int64(s, i, static_cast<sqlite3_int64>(v));
  };
  for (const Op& op : ops) {
    sqlite3_stmt* s = nullptr;
    if (auto* r = std::get_if<IndexRow>(&op)) {
      s = put.get();
      text(s, 1, r->ns);
      text(s, 2, r->key);
      i64(s, 3, r->seq);
      i64(s, 4, r->loc.segment);
      i64(s, 5, r->loc.offset);
      i64(s, 6, r->loc.stored_len);
      i64(s, 7, static_cast<uint64_t>(r->loc.codec));
      i64(s, 8, r->bytes);
      i64(s, 9, r->checksum);
      i64(s, 10, static_cast<uint64_t>(r->meta.dtype));
      text(s, 11, r->meta.ShapeString());
      i64(s, 12, r->created_us);
      i64(s, 13, r->last_access_us);
      i64(s, 14, r->hits);
      sqlite3_bind_double(s, 15, r->meta.recompute_cost);
    } else if (auto* d = std::get_if<Delete>(&op)) {
      s = del.get();
      text(s, 1, d->ns);
      text(s, 2, d->key);
      i64(s, 3, d->seq);
    } else if (auto* t = std::get_if<Touch>(&op)) {
      s = touch.get();
      i64(s, 1, t->last_access_us);
      i64(s, 2, t->hits);
      text(s, 3, t->ns);
      text(s, 4, t->key);
    } else if (auto* tl = std::get_if<Tail>(&op)) {
      s = tail.get();
      i64(s, 1, tl->segment);
      i64(s, 2, tl->tail);
    } else if (auto* ds = std::get_if<DropSegment>(&op)) {
      i64(drop_rows.get(), 1, ds->segment);
      sqlite3_step(drop_rows.get());
      sqlite3_reset(drop_rows.get());
      s = drop.get();
      i64(s, 1, ds->segment);
    }
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc != SQLITE_DONE) {
      Status st = SqlError(db_, "write");
      Exec("ROLLBACK");
      return st;
    }
  }
  if (int err = env_->BeforeIndexCommit(); err != 0) {
    Exec("ROLLBACK");
    return Status::FromErrno(err, "index commit");
  }
  Status st = Exec("COMMIT");
  if (!st.ok()) Exec("ROLLBACK");  // a failed COMMIT can leave the transaction open
  return st;
}

// A batch that fails to commit (a full disk, an I/O error) is kept and retried, with the
// ops enqueued since appended behind it, until it commits: every change is committed in the
// order it was enqueued, so a segment's tail is never recorded past a put or delete that is
// not. Were a failed batch dropped, a later tail would tell the next recovery that the
// segment was indexed past records the index never learned, and acknowledged puts would
// vanish and erases come back. Touches (access statistics only) are dropped on failure.
void Index::WriterLoop() {
  std::vector<Op> batch;
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    uint64_t upto;
    bool stopping;
    {
      UniqueLock l(&mu_);
      if (batch.empty()) {
        while (!(stop_ || !queue_.empty())) cv_.Wait(l);
      } else {
        const auto until = std::chrono::steady_clock::now() + backoff;
        while (!(stop_ || retry_now_) && cv_.WaitUntil(l, until)) {
        }
      }
      retry_now_ = false;
      if (queue_.empty() && batch.empty()) return;
      while (!queue_.empty()) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      upto = enqueued_;
      stopping = stop_;
    }
    Status st = Apply(batch);
    Status held_back;
    {
      MutexLock l(&mu_);
      attempted_ = upto;
      if (st.ok()) committed_ = upto;
      held_back = std::exchange(last_error_, st);
    }
    committed_cv_.NotifyAll();
    if (st.ok() && !held_back.ok())
      spdlog::info("index: the changes held back by \"{}\" are written", held_back.message());
    if (st.ok()) {
      batch.clear();
      backoff = std::chrono::milliseconds(50);
      continue;
    }
    batch.erase(std::remove_if(batch.begin(), batch.end(),
                               [](const Op& op) { return std::holds_alternative<Touch>(op); }),
                batch.end());
    if (error_log_.Allow())
      spdlog::error("index: {} change(s) not written ({}); kept and retried", batch.size(),
                    st.ToString());
    if (stopping) {
      spdlog::error(
          "index: closing with {} change(s) not written ({}); the next open reads them back "
          "from the segment files",
          batch.size(), st.ToString());
      return;
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace ecstore
