// Env: the one seam between ec-store and the OS (files, clock, I/O fault points), in the
// manner of LevelDB's Env. Tests wrap it to inject ENOSPC/EIO and torn writes or to fake time.
// Thread rules: every method may be called from any thread; implementations must be
// thread-safe.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace ecstore {

// Move-only owner of a file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

enum class IoOp { kRead, kWrite, kSync };

class Env {
 public:
  virtual ~Env() = default;
  static Env* Default();  // process-wide, never deleted

  virtual uint64_t NowMicros() = 0;
  virtual Result<UniqueFd> OpenFile(const std::string& path, int flags, int mode = 0644) = 0;
  virtual Status CreateDirs(const std::string& path) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual Result<uint64_t> FileSize(int fd) = 0;
  virtual Status Truncate(int fd, uint64_t size) = 0;
  // Allocates the file's blocks up to `size` (its length grows to it; reads there see zeros).
  virtual Status Preallocate(int fd, uint64_t size) = 0;
  virtual Status SyncData(int fd) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // Bytes an unprivileged writer can still use on the filesystem holding `path`.
  virtual Result<uint64_t> FreeBytes(const std::string& path) = 0;

  // Fault point consulted by the I/O queue before each read/write reaches the kernel.
  // Returns 0 to let the op run, or an errno (ENOSPC, EIO, ...) to fail it with. A return of
  // -N for a write means "torn write": only the first N bytes are written, then EIO.
  virtual int BeforeIo(IoOp /*op*/, int /*fd*/, uint64_t /*offset*/, size_t /*len*/) { return 0; }
  // Fault point consulted before the index commits a transaction (SQLite does its own I/O):
  // 0 to commit, or an errno (ENOSPC, EIO) to fail the commit with, as a full disk would.
  virtual int BeforeIndexCommit() { return 0; }
};

// Forwards everything to a target Env; subclass it to override a few methods in tests.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  uint64_t NowMicros() override { return target_->NowMicros(); }
  Result<UniqueFd> OpenFile(const std::string& p, int f, int m) override {
    return target_->OpenFile(p, f, m);
  }
  Status CreateDirs(const std::string& p) override { return target_->CreateDirs(p); }
  Status RemoveFile(const std::string& p) override { return target_->RemoveFile(p); }
  Status RenameFile(const std::string& f, const std::string& t) override {
    return target_->RenameFile(f, t);
  }
  Result<std::vector<std::string>> ListDir(const std::string& p) override {
    return target_->ListDir(p);
  }
  Result<uint64_t> FileSize(int fd) override { return target_->FileSize(fd); }
  Status Truncate(int fd, uint64_t s) override { return target_->Truncate(fd, s); }
  Status Preallocate(int fd, uint64_t s) override { return target_->Preallocate(fd, s); }
  Status SyncData(int fd) override { return target_->SyncData(fd); }
  bool FileExists(const std::string& p) override { return target_->FileExists(p); }
  Result<uint64_t> FreeBytes(const std::string& p) override { return target_->FreeBytes(p); }
  int BeforeIo(IoOp op, int fd, uint64_t off, size_t len) override {
    return target_->BeforeIo(op, fd, off, len);
  }
  int BeforeIndexCommit() override { return target_->BeforeIndexCommit(); }

 protected:
  Env* target_;
};

}  // namespace ecstore
