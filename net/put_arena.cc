#include "net/put_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/mutex.h"
#include "net/transport.h"

namespace ecstore::net {
namespace {
constexpr uint64_t kBlockAlign = 4096;  // each block starts on a page, as DMA likes it
}  // namespace

uint64_t AwaitLandingWord(const uint64_t* word, uint64_t want,
                          std::chrono::steady_clock::time_point deadline) {
  uint64_t landed = 0;
  auto ready = [&] {
    landed = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    return landed >= want;  // kFailed too
  };
  for (int spin = 0; spin < 256; ++spin) {
    if (ready()) return landed;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= deadline) return landed;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return landed;
}

Status NotLanded(const char* why) {
  return Status::InvalidArgument(std::string("the put's bytes ") + why +
                                 "; nothing was stored: put it again");
}

LandingCounter::LandingCounter(std::shared_ptr<SharedArena> arena, uint64_t word_offset)
    : arena_(std::move(arena)),
      word_(reinterpret_cast<uint64_t*>(arena_->bytes().data() + word_offset)) {}

// The client may write the memfd and map it as it likes, but not change its size: a shrunk
// memfd would make the server's next read of it SIGBUS.
Result<std::shared_ptr<SharedArena>> SharedArena::Create(uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxArenaBytes)
    return Status::InvalidArgument("a put arena of " + std::to_string(bytes) +
                                   " bytes: ask for 1 byte to " + std::to_string(kMaxArenaBytes));
  UniqueFd fd(memfd_create("ec-store-put-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return Status::FromErrno(errno, "memfd_create for a put arena");
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return Status::FromErrno(errno, "size a put arena");
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return Status::FromErrno(errno, "seal a put arena's size");
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap a put arena");
  return std::shared_ptr<SharedArena>(
      new SharedArena(std::move(fd), static_cast<uint8_t*>(p), bytes));
}

Result<std::shared_ptr<SharedArena>> SharedArena::Map(int passed_fd, uint64_t bytes) {
  UniqueFd fd(passed_fd);
  if (!fd.valid()) return Status::Unavailable("server did not pass the put arena");
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return Status::FromErrno(errno, "fstat the put arena");
  if (bytes == 0 || static_cast<uint64_t>(st.st_size) != bytes)
    return Status::Unavailable("the put arena passed is " + std::to_string(st.st_size) +
                               " bytes, not the " + std::to_string(bytes) + " announced");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap the put arena");
  madvise(p, bytes, MADV_HUGEPAGE);  // granted where shmem_enabled allows
  // The mapping keeps the memory; this side needs no descriptor.
  return std::shared_ptr<SharedArena>(new SharedArena(UniqueFd(), static_cast<uint8_t*>(p), bytes));
}

SharedArena::~SharedArena() {
  MemoryRegion region;
  region.base = base_;
  region.size = size_;
  if (registrar_) registrar_->Deregister(region);
  munmap(base_, size_);
}

Status SharedArena::RegisterWith(std::shared_ptr<MemoryRegistrar> registrar) {
  if (!registrar || registrar == registrar_) return Status::Ok();
  if (registrar_)
    return Status::InvalidArgument(std::string("this put arena is registered with ") +
                                   registrar_->Name() + " already");
  MemoryRegion region;
  region.base = base_;
  region.size = size_;
  EC_RETURN_IF_ERROR(registrar->Register(region).WithContext("registering a put arena"));
  registrar_ = std::move(registrar);
  return Status::Ok();
}

std::optional<uint64_t> SharedArena::Allocate(uint64_t size) {
  if (size == 0) size = 1;
  MutexLock l(&mu_);
  uint64_t at = 0;
  auto it = used_.begin();
  for (; it != used_.end(); ++it) {
    if (it->first >= at && it->first - at >= size) break;
    at = (it->first + it->second + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  }
  if (at > size_ || size_ - at < size) return std::nullopt;
  used_.insert(it, {at, size});
  return at;
}

void SharedArena::Free(uint64_t offset) {
  MutexLock l(&mu_);
  auto it = std::find_if(used_.begin(), used_.end(),
                         [offset](const auto& u) { return u.first == offset; });
  if (it != used_.end()) used_.erase(it);
}

ArenaReservation& ArenaReservation::operator=(ArenaReservation&& o) noexcept {
  if (this == &o) return *this;
  if (arena_) arena_->Free(offset_);
  arena_ = std::move(o.arena_);
  offset_ = o.offset_;
  size_ = o.size_;
  counter_offset_ = o.counter_offset_;
  head_ = std::move(o.head_);
  o.arena_.reset();
  return *this;
}

ArenaReservation::~ArenaReservation() {
  if (arena_) arena_->Free(offset_);
}

LandingCounter ArenaReservation::Landing() const {
  if (!arena_ || counter_offset_ == kNoCounter) return {};
  return LandingCounter(arena_, counter_offset_);
}

Status ArenaReservation::AwaitLanded(std::chrono::milliseconds timeout, uint64_t at_least) const {
  if (!arena_ || counter_offset_ == kNoCounter) return Status::Ok();
  const uint64_t want = std::min(at_least, size_);
  const uint64_t landed =
      AwaitLandingWord(reinterpret_cast<const uint64_t*>(arena_->bytes().data() + counter_offset_),
                       want, std::chrono::steady_clock::now() + timeout);
  if (landed == LandingCounter::kFailed) return NotLanded("were given up by their writer");
  return landed >= want ? Status::Ok() : NotLanded("did not land in time");
}

std::string PutShmBody(const std::string& head, uint64_t offset, uint64_t size, uint8_t flags,
                       uint64_t counter_offset) {
  BodyWriter w;
  w.Raw(head.data(), head.size());
  w.U64(offset);
  w.U64(size);
  w.U8(flags);
  if (flags & kPutLanding) w.U64(counter_offset);
  return w.data();
}

// ---------------------------------------------------------- transports without arenas

Result<ArenaReservation> Transport::ReservePut(Channel&, std::string, uint64_t, bool) {
  return Status::InvalidArgument(
      "put arenas need a same-host server (the unix socket) that offers them; use Put");
}

Status Transport::CommitPut(Channel& ch, const ArenaReservation& r, bool) {
  // A landing block whose arena is gone (a new connection): its bytes once they have landed.
  EC_RETURN_IF_ERROR(r.AwaitLanded(std::chrono::seconds(30)));
  return Transport::Put(ch, r.head(), r.bytes());
}

Status Transport::PutFromDevice(Channel&, const std::string&, const void*, uint64_t, uint8_t) {
  return Status::InvalidArgument(
      "device puts need a same-host server (the unix socket) that sees a GPU and offers them; "
      "put through ReservePut");
}

Status Transport::PutManyFromDevice(Channel&, std::string_view, const std::vector<DeviceSource>&,
                                    uint8_t, std::vector<Status>*) {
  return Status::InvalidArgument("PUT_DEVICE_MANY is not offered here; put each item");
}

Status Transport::Put(Channel& ch, const std::string& head, std::span<const uint8_t> bytes) {
  EC_RETURN_IF_ERROR(ch.SendRequest(Op::kPut, head, bytes));
  return ch.ReadReply(Op::kOk).status();
}

}  // namespace ecstore::net
