#include "base/host_buffer.h"

#include <cstring>
#include <utility>

namespace ecstore {

Result<HostBuffer> HostBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("a host buffer needs at least 1 byte");
  HostBuffer b;
  b.backend_ = NewHostPinnedBackend();
  auto region = b.backend_->Map(bytes);
  if (!region.ok()) return region.status().WithContext("allocating a host buffer");
  b.region_ = *region;
  b.size_ = bytes;
  return b;
}

HostBuffer::HostBuffer(HostBuffer&& o) noexcept { *this = std::move(o); }

HostBuffer& HostBuffer::operator=(HostBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    backend_ = std::move(o.backend_);
    region_ = std::exchange(o.region_, MemoryRegion{});
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { Release(); }

void HostBuffer::Release() {
  if (backend_ && region_.base) backend_->Unmap(region_);
  backend_.reset();
  region_ = {};
  size_ = 0;
}

}  // namespace ecstore
