#include "server/arena_puts.h"

#include <algorithm>

namespace ecstore::net {

namespace {
// A landing block is copied once at least this much more of it has landed (or all of it):
// smaller pieces cost more in hand-overs than they gain in overlap.
constexpr uint64_t kLandingPiece = 1ull << 20;

// A landing counter once it reaches `want` (or kFailed), or what it holds at `deadline`.
uint64_t AwaitCounter(const SharedArena& arena, uint64_t counter_at, uint64_t want,
                      std::chrono::steady_clock::time_point deadline) {
  return AwaitLandingWord(reinterpret_cast<const uint64_t*>(arena.bytes().data() + counter_at),
                          want, deadline);
}

Status AwaitFirstPiece(const ArenaContext& cx, const SharedArena& arena, uint64_t size,
                       uint64_t counter_at) {
  const uint64_t want = std::min(size, kLandingPiece);
  const uint64_t landed =
      AwaitCounter(arena, counter_at, want, std::chrono::steady_clock::now() + cx.landing_timeout);
  if (landed == LandingCounter::kFailed) return NotLanded("were given up by the client");
  if (landed < want) return NotLanded("did not land within the server's io_timeout");
  return Status::Ok();
}

// A landing block's bytes into dst, each piece as the client's counter passes it.
Status CopyAsItLands(const ArenaContext& cx, const SharedArena& arena, uint64_t offset,
                     uint64_t size, uint64_t counter_at, uint8_t* dst) {
  const uint8_t* src = arena.bytes().data() + offset;
  const auto deadline = std::chrono::steady_clock::now() + cx.landing_timeout;
  uint64_t copied = 0;
  while (copied < size) {
    uint64_t landed =
        AwaitCounter(arena, counter_at, std::min(size, copied + kLandingPiece), deadline);
    if (landed == LandingCounter::kFailed) return NotLanded("were given up by the client");
    landed = std::min(landed, size);
    if (landed <= copied) return NotLanded("did not land within the server's io_timeout");
    cx.copier->Copy({{dst + copied, src + copied, landed - copied}});
    copied = landed;
  }
  return Status::Ok();
}

Status PutFromArena(const ArenaContext& cx, const SharedArena* arena, const KeyRef& k,
                    const TensorMeta& meta, uint64_t offset, uint64_t size, uint8_t flags,
                    uint64_t counter_at) {
  if (!arena) return Status::InvalidArgument("PUT_SHM before PUT_ARENA: ask for an arena first");
  const uint64_t arena_bytes = arena->bytes().size();
  if (offset > arena_bytes || size > arena_bytes - offset)
    return Status::InvalidArgument("PUT_SHM of [" + std::to_string(offset) + ", +" +
                                   std::to_string(size) + ") lies outside the " +
                                   std::to_string(arena_bytes) + "-byte put arena");
  const bool landing = flags & kPutLanding;
  if (landing && (counter_at % 8 != 0 || arena_bytes < 8 || counter_at > arena_bytes - 8 ||
                  (counter_at < offset + size && counter_at + 8 > offset)))
    return Status::InvalidArgument("PUT_SHM's landing counter at " + std::to_string(counter_at) +
                                   " is not an aligned u64 of the arena outside the block");
  // A landing block holds no pool space until its first piece has landed: one that never
  // lands (a stalled or hostile writer) cannot keep other clients' puts out of the pool.
  if (landing) EC_RETURN_IF_ERROR(AwaitFirstPiece(cx, *arena, size, counter_at));
  auto res = cx.store->Reserve(k.ns, k.key, meta, size);
  if (!res.ok()) return res.status();
  if (landing) {  // dropped uncommitted on an error: nothing stored
    EC_RETURN_IF_ERROR(CopyAsItLands(cx, *arena, offset, size, counter_at, res->bytes().data()));
    if (flags & kPutChecksumWhenSpilled) res->ChecksumWhenSpilled();
    return cx.store->Commit(std::move(res).value());
  }
  // One copy of the whole block (split across the copier's threads where it has some: one
  // thread's memcpy of a 57.8 MB entry takes milliseconds), then the checksum (or none,
  // left to the spill): a large memcpy streams with non-temporal stores that piecewise
  // copy-and-hash gives up (as Store::Put measured). The stored bytes are this copy: a
  // client writing the block meanwhile changes only what it puts, and the checksum is
  // always of the pool's bytes.
  cx.copier->Copy({{res->bytes().data(), arena->bytes().data() + offset, size}});
  if (flags & kPutChecksumWhenSpilled) res->ChecksumWhenSpilled();
  return cx.store->Commit(std::move(res).value());
}
}  // namespace

Result<Answer> AnswerArena(const ArenaContext& cx, Op op, BodyReader* r,
                           std::shared_ptr<SharedArena>* arena, std::string* ns, std::string* key,
                           uint64_t* bytes_in) {
  if (op == Op::kPutArena) {
    uint64_t bytes;
    if (!r->U64(&bytes)) return Status::InvalidArgument("malformed PUT_ARENA");
    const uint64_t old = *arena ? (*arena)->bytes().size() : 0;
    const uint64_t held = cx.arena_bytes->fetch_add(bytes) + bytes - old;
    if (bytes > old && held > cx.arena_budget) {
      cx.arena_bytes->fetch_sub(bytes);
      return Answer{Status::Busy("the server's put arenas hold " + std::to_string(held - bytes) +
                                 " of their " + std::to_string(cx.arena_budget) +
                                 " bytes; put through the socket (or raise --arena-budget)"),
                    Op::kError,
                    {}};
    }
    auto a = SharedArena::Create(bytes);
    if (!a.ok()) {
      cx.arena_bytes->fetch_sub(bytes);
      return Answer{a.status(), Op::kError, {}};
    }
    cx.arena_bytes->fetch_sub(old);
    *arena = std::move(a).value();  // blocks of the old one are committed as plain PUTs
    BodyWriter w;
    w.U64(bytes);
    return Answer{Status::Ok(), Op::kPutArenaOk, w.data()};
  }
  auto k = ParseKeyBody(r);
  if (!k.ok()) return k.status();
  TensorMeta meta;
  uint64_t offset, size, counter_at = 0;
  uint8_t flags;
  if (!r->Meta(&meta) || !r->U64(&offset) || !r->U64(&size) || !r->U8(&flags) ||
      ((flags & kPutLanding) && !r->U64(&counter_at)))
    return Status::InvalidArgument("malformed PUT_SHM");
  *ns = k->ns;
  *key = k->key;
  *bytes_in = size;
  return Answer{
      PutFromArena(cx, arena->get(), *k, meta, offset, size, flags, counter_at), Op::kOk, {}};
}

}  // namespace ecstore::net
