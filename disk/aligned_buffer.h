// Move-only, 4 KiB-aligned heap buffer for O_DIRECT staging (compression, unaligned callers).
// Thread rules: owned by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <utility>

namespace ecstore {

inline constexpr uint64_t kBlockSize = 4096;
inline uint64_t RoundUpBlock(uint64_t n) { return (n + kBlockSize - 1) / kBlockSize * kBlockSize; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) : size_(RoundUpBlock(bytes)) {
    if (size_ && posix_memalign(reinterpret_cast<void**>(&data_), kBlockSize, size_) != 0)
      throw std::bad_alloc();
  }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { free(data_); }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ecstore
