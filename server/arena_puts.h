// Put arenas, the server's half: PUT_ARENA makes a connection's arena (net/put_arena.h), PUT_SHM
// copies a block of it into a pool reservation and commits. A landing block is copied piece by
// piece as its counter passes them, and holds no pool space until its first piece has landed.
//
//   ArenaContext cx{store, &copier, io_timeout, &arena_bytes, arena_budget};
//   auto a = AnswerArena(cx, op, &reader, &conn.arena, &ns, &key, &bytes_in);
//
// Thread rules: AnswerArena runs on a connection's thread; cx.arena_bytes is shared by all
// of them (atomic).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/copy_pool.h"
#include "net/protocol.h"
#include "net/put_arena.h"
#include "store/store.h"

namespace ecstore::net {

// What the server's arena requests use: its store, the copier that splits each block's
// copy, and how long a landing block may take to land.
struct ArenaContext {
  Store* store;
  CopyPool* copier;
  std::chrono::milliseconds landing_timeout;
  // Every connection's arena bytes together, and their bound: a PUT_ARENA past it is Busy
  // (the client then puts through the socket), so that clients cannot make the daemon
  // fault in gigabytes of shared memory each.
  std::atomic<uint64_t>* arena_bytes;
  uint64_t arena_budget;
};
// Server: answers PUT_ARENA (a new arena for the connection replaces *arena; the reply
// passes (*arena)->fd()) or PUT_SHM (a block of *arena put into the store: a block outside
// it, or no arena yet, is the answer's InvalidArgument). A malformed body is the outer
// status: answer it, then close the connection. *key and *bytes_in are set for the log.
// The block is copied by cx.copier (the caller's thread and its helpers); a landing block
// piece by piece as its counter passes them, waiting up to cx.landing_timeout for the rest.
Result<Answer> AnswerArena(const ArenaContext& cx, Op op, BodyReader* r,
                           std::shared_ptr<SharedArena>* arena, std::string* ns, std::string* key,
                           uint64_t* bytes_in);

}  // namespace ecstore::net
