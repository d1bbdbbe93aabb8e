#include "bench/baseline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/safetensors.h"

namespace ecstore::bench {

std::string FileBaseline::PathOf(const std::string& key) const {
  return dir_ + "/" + key + "/encoder_cache.safetensors";
}

Status FileBaseline::Save(const std::string& key, const TensorMeta& meta,
                          std::span<const uint8_t> bytes) {
  std::string d = dir_ + "/" + key;
  ::mkdir(dir_.c_str(), 0755);
  if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno(errno, d);
  EC_RETURN_IF_ERROR(safetensors::Save(PathOf(key), meta, bytes));
  Touch(key, bytes.size());
  return Status::Ok();
}

bool FileBaseline::Exists(const std::string& key) {
  struct stat st;
  return ::stat(PathOf(key).c_str(), &st) == 0;
}

Status FileBaseline::Load(const std::string& key, std::vector<uint8_t>* file, uint64_t* offset,
                          TensorMeta* meta) {
  std::string path = PathOf(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, path);
  struct stat st;
  fstat(fd, &st);
  file->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < file->size()) {
    ssize_t n = ::read(fd, file->data() + done, file->size() - done);
    if (n <= 0) {
      ::close(fd);
      return Status::IOError("short read of " + path);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  auto layout = safetensors::ParseHeader({file->data(), file->size()}, file->size());
  if (!layout.ok()) return layout.status();
  *offset = layout->data_offset;
  *meta = layout->meta;
  Touch(key, layout->data_bytes);
  return Status::Ok();
}

void FileBaseline::DropCache(const std::string& key) {
  int fd = ::open(PathOf(key).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);  // dirty pages cannot be dropped; the kernel would write them back too
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void FileBaseline::DropAllCaches() {
  for (auto& [k, _] : lru_) DropCache(k);
  lru_.clear();
  where_.clear();
  cached_ = 0;
}

void FileBaseline::Touch(const std::string& key, uint64_t bytes) {
  auto it = where_.find(key);
  if (it != where_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    lru_.emplace_front(key, bytes);
    where_[key] = lru_.begin();
    cached_ += bytes;
  }
  while (budget_ && cached_ > budget_ && lru_.size() > 1) {
    auto& victim = lru_.back();
    DropCache(victim.first);
    cached_ -= victim.second;
    where_.erase(victim.first);
    lru_.pop_back();
  }
}

}  // namespace ecstore::bench
