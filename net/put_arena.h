// Put arenas: same-host puts that do not travel through the socket.
//
// A client on the unix socket may ask for a put arena (PUT_ARENA). The server makes a memfd,
// seals it against shrinking and growing (so no client can make the server's reads of it
// fault), maps it read-only and passes it with the reply; the client maps it writable. The
// client fills a block of it -- a device->host copy lands there directly, with no staging
// buffer and no copies into and out of socket buffers -- and sends PUT_SHM with the block's
// offset and size. The server copies the block into a pool reservation, checksumming each
// piece as it lands (or leaving the checksum to the spill), and commits. The stored bytes
// are the server's copy, never memory a client can still write, so the pool stays sealed
// against clients and a checksum always describes what readers get.
//
//   auto r = client->ReservePut("qwen", mm_hash, meta, bytes);  // Client (net/client.h)
//   cudaMemcpy(r->bytes().data(), dev_ptr, bytes, cudaMemcpyDeviceToHost);
//   EC_RETURN_IF_ERROR(client->CommitPut(std::move(r).value()));
//
// A landing put overlaps the two copies: reserved with `landing`, the block has a counter
// beside it (LandingCounter) that the filling thread raises as pieces land, and CommitPut
// may be sent at once, from another thread -- the server copies each piece as the counter
// passes it, so the device->host copy and the server's copy run together. A server without
// kFeaturePutLanding gives no counter: fill, then commit.
//
// The server's half (PUT_ARENA, PUT_SHM) is server/arena_puts.h.
//
// Thread rules: a SharedArena is shared (shared_ptr) by the transport that asked for it and
// the reservations carved from it; Allocate and Free may be called from any thread. An
// ArenaReservation is used by one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/copy_pool.h"
#include "base/memory_backend.h"
#include "base/mutex.h"
#include "base/status.h"
#include "net/protocol.h"
#include "net/socket.h"

namespace ecstore::net {

// The most a server maps for one connection's arena (a client asks for at least twice its
// largest put, at least kMinArenaBytes).
inline constexpr uint64_t kMaxArenaBytes = 4ull << 30;
inline constexpr uint64_t kMinArenaBytes = 64ull << 20;

class SharedArena {
 public:
  // Server: a new memfd of `bytes`, sealed against shrinking and growing, mapped read-only.
  static Result<std::shared_ptr<SharedArena>> Create(uint64_t bytes);
  // Client: the arena passed with PUT_ARENA_OK, mapped writable; its size checked by fstat.
  static Result<std::shared_ptr<SharedArena>> Map(int passed_fd, uint64_t bytes);
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;
  // Client: registers the mapping (with CUDA, so device->host copies land at pinned speed)
  // and deregisters it before it is unmapped -- a registration outliving its mapping would
  // send later copies to pages nobody reads. Once; a second registrar is refused.
  Status RegisterWith(std::shared_ptr<MemoryRegistrar> registrar);

  int fd() const { return fd_.get(); }
  std::span<uint8_t> bytes() const { return {base_, size_}; }
  // Client: the offset of a free block of `size` bytes (64-byte aligned), or nullopt when
  // the blocks in use leave no room; Free gives it back.
  std::optional<uint64_t> Allocate(uint64_t size);
  void Free(uint64_t offset);

 private:
  SharedArena(UniqueFd fd, uint8_t* base, uint64_t size)
      : fd_(std::move(fd)), base_(base), size_(size) {}
  UniqueFd fd_;
  uint8_t* base_;
  uint64_t size_;
  std::shared_ptr<MemoryRegistrar> registrar_;  // registered with, until the unmap
  Mutex mu_;
  std::vector<std::pair<uint64_t, uint64_t>> used_ GUARDED_BY(mu_);  // (offset, size), by offset
};

// How much of a landing block has landed: a u64 in the arena beside the block, raised by the
// client (release stores, never lowered) and read by the server as it copies. Fail() tells
// the server the bytes will not come (it stores nothing). It keeps the arena mapped.
// Thread rules: any thread may call Landed/Fail while another commits the reservation.
class LandingCounter {
 public:
  static constexpr uint64_t kFailed = UINT64_MAX;
  LandingCounter() = default;
  LandingCounter(std::shared_ptr<SharedArena> arena, uint64_t word_offset);
  explicit operator bool() const { return word_ != nullptr; }
  void Landed(uint64_t bytes) const { __atomic_store_n(word_, bytes, __ATOMIC_RELEASE); }
  void Fail() const { Landed(kFailed); }
  uint64_t Load() const { return __atomic_load_n(word_, __ATOMIC_ACQUIRE); }

 private:
  std::shared_ptr<SharedArena> arena_;
  uint64_t* word_ = nullptr;
};

// A block of a connection's put arena held for one put (Client::ReservePut): fill bytes(),
// then Client::CommitPut. It keeps its arena mapped, so its bytes stay valid whatever
// happens to the connection; if the connection was re-established meanwhile (the server
// restarted, the arena was replaced by a larger one), the commit sends them as a plain PUT.
// Dropped uncommitted, nothing is put.
class ArenaReservation {
 public:
  ArenaReservation() = default;
  static constexpr uint64_t kNoCounter = UINT64_MAX;
  ArenaReservation(std::shared_ptr<SharedArena> arena, uint64_t offset, uint64_t size,
                   std::string head, uint64_t counter_offset = kNoCounter)
      : arena_(std::move(arena)),
        offset_(offset),
        size_(size),
        counter_offset_(counter_offset),
        head_(std::move(head)) {}
  ArenaReservation(ArenaReservation&& o) noexcept { *this = std::move(o); }
  ArenaReservation& operator=(ArenaReservation&& o) noexcept;
  ~ArenaReservation();
  std::span<uint8_t> bytes() const {
    return arena_ ? arena_->bytes().subspan(offset_, size_) : std::span<uint8_t>();
  }
  const SharedArena* arena() const { return arena_.get(); }
  uint64_t offset() const { return offset_; }
  const std::string& head() const { return head_; }  // the PUT body before the bytes
  // A landing block's counter (reserved with `landing` from a server that offers it); a
  // false one otherwise.
  LandingCounter Landing() const;
  uint64_t counter_offset() const { return counter_offset_; }
  // Until the counter says every byte (or `at_least` of them) landed: Ok, or InvalidArgument
  // if it was failed or `timeout` passed first. At once for a block without a counter.
  Status AwaitLanded(std::chrono::milliseconds timeout, uint64_t at_least = UINT64_MAX) const;

 private:
  std::shared_ptr<SharedArena> arena_;
  uint64_t offset_ = 0, size_ = 0, counter_offset_ = kNoCounter;
  std::string head_;
};

// Where a landing block's counter goes: the first 64-byte boundary after its bytes (the
// block is allocated with room for it).
inline uint64_t LandingCounterAt(uint64_t offset, uint64_t size) {
  return offset + (size + 63) / 64 * 64;
}
inline uint64_t LandingBlockBytes(uint64_t size) { return (size + 63) / 64 * 64 + 64; }
// A host put through the arena (ShmTransport::Put) lands its bytes this much at a time.
inline constexpr uint64_t kPutLandingPiece = 1ull << 20;

// The PUT_SHM body: the PUT head (ns, key, meta), then the block and the flags (with
// kPutLanding, then the counter's offset).
std::string PutShmBody(const std::string& head, uint64_t offset, uint64_t size, uint8_t flags,
                       uint64_t counter_offset = ArenaReservation::kNoCounter);
// Until the landing counter at `word` reaches `want` (or kFailed) or `deadline` passes: what
// it holds then. A short spin (pieces land every ~0.1-0.3 ms on a GPU host), then 20 us
// sleeps, so a slow writer costs the waiting thread no core.
uint64_t AwaitLandingWord(const uint64_t* word, uint64_t want,
                          std::chrono::steady_clock::time_point deadline);
// The error of a put whose bytes did not come (`why`: "did not land in time", ...).
Status NotLanded(const char* why);

}  // namespace ecstore::net
