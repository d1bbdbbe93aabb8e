#include "base/env.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>

namespace ecstore {
namespace {

class PosixEnv : public Env {
 public:
  uint64_t NowMicros() override {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
  }
  Result<UniqueFd> OpenFile(const std::string& path, int flags, int mode) override {
    int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    return UniqueFd(fd);
  }
  Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return Status::FromErrno(ec.value(), "create directory " + path);
    return Status::Ok();
  }
  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status::FromErrno(errno, "remove " + path);
    return Status::Ok();
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0)
      return Status::FromErrno(errno, "rename " + from + " to " + to);
    return Status::Ok();
  }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return Status::FromErrno(errno, "list " + path);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    return names;
  }
  Result<uint64_t> FileSize(int fd) override {
    struct stat st;
    if (fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat");
    return static_cast<uint64_t>(st.st_size);
  }
  Status Truncate(int fd, uint64_t size) override {
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) return Status::FromErrno(errno, "truncate");
    return Status::Ok();
  }
  // A fallocate that fails for want of space keeps the blocks it got (ext4 does): on a
  // nearly full disk those were the last free ones, and the index could not commit nor the
  // store restart. They are given back: the file is cut to its length before the call.
  Status Preallocate(int fd, uint64_t size) override {
    struct stat before {};
    if (fstat(fd, &before) != 0) return Status::FromErrno(errno, "stat");
    if (::fallocate(fd, 0, 0, static_cast<off_t>(size)) == 0) return Status::Ok();
    const int err = errno;
    if (static_cast<uint64_t>(before.st_size) < size) {
      (void)!::ftruncate(fd, before.st_size);
      (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, before.st_size,
                        static_cast<off_t>(size - before.st_size));
    }
    return Status::FromErrno(err, "fallocate");
  }
  Status SyncData(int fd) override {
    if (::fdatasync(fd) != 0) return Status::FromErrno(errno, "fdatasync");
    return Status::Ok();
  }
  bool FileExists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  Result<uint64_t> FreeBytes(const std::string& path) override {
    struct statvfs fs {};
    if (::statvfs(path.c_str(), &fs) != 0) return Status::FromErrno(errno, "statvfs " + path);
    return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv();
  return env;
}

}  // namespace ecstore
