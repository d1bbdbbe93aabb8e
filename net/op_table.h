// The one table of the protocol's ops: for each, whether a client may send it and over which
// connections, the right it needs and where its namespaces are in its body, whether it reads
// the pool in place, and its metrics label. IsKnownOp, IsRequest, the access check
// (ScopeOf), the in-place rule and the metrics are lookups here; Server::Handle keeps only
// the dispatch. An op added to the enum without a row is unknown (refused as malformed), and a
// request row without a right does not compile: every request says the right it needs, or
// kNoRight where it needs none.
//
//   const OpRow* row = FindOp(Op::kGet);   // null: not an op
//   if (row && row->request && row->right == kRead) ...
//
// Thread rules: constant data.
#pragma once

#include <array>
#include <cstdint>

#include "net/protocol.h"

namespace ecstore::net {

// The rights an ACL grants (server/acl.h); kNoRight: the op needs none (HELLO, RELEASE,
// VIEW), said explicitly so that a row that names no right cannot compile.
enum Right : uint8_t { kRead = 1, kWrite = 2, kAdmin = 4, kEvents = 8, kAll = 15, kNoRight = 0x80 };

// Where the namespaces of a request are: none (a right over some namespace, or none needed),
// its first field, n x (ns, key) pairs, or every namespace (the whole server's).
enum class NsAt : uint8_t { kNone, kFirst, kPairs, kEvery };

// Which connections may send it: any, the unix socket alone, or a TCP one of a server with
// RDMA.
enum class Via : uint8_t { kAny, kShm, kRdma };

struct OpRow {
  Op op;
  bool request;
  Via via;
  uint8_t right;
  NsAt ns;
  bool in_place;      // reads the pool in place: a mapping, the device pool, an rkey
  const char* label;  // its metrics label; "" for replies
  Op counted_as;      // the request row its metrics go to (a GET_SHM is a GET)
};

namespace op_rows {
constexpr OpRow Req(Op op, Via via, uint8_t right, NsAt ns, const char* label, Op as,
                    bool in_place = false) {
  return {op, true, via, right, ns, in_place, label, as};
}
constexpr OpRow Reply(Op op) {
  return {op, false, Via::kAny, kNoRight, NsAt::kNone, false, "", op};
}
}  // namespace op_rows

inline constexpr OpRow kOpTable[] = {
    op_rows::Req(Op::kHello, Via::kAny, kNoRight, NsAt::kNone, "hello", Op::kHello),
    op_rows::Req(Op::kGet, Via::kAny, kRead, NsAt::kFirst, "get", Op::kGet),
    op_rows::Req(Op::kLookup, Via::kAny, kRead, NsAt::kPairs, "lookup", Op::kLookup),
    op_rows::Req(Op::kPut, Via::kAny, kWrite, NsAt::kFirst, "put", Op::kPut),
    op_rows::Req(Op::kErase, Via::kAny, kWrite, NsAt::kFirst, "erase", Op::kErase),
    op_rows::Req(Op::kStats, Via::kAny, kAdmin, NsAt::kEvery, "stats", Op::kStats),
    op_rows::Req(Op::kGetShm, Via::kShm, kRead, NsAt::kFirst, "get", Op::kGet, true),
    op_rows::Req(Op::kRelease, Via::kAny, kNoRight, NsAt::kNone, "release", Op::kRelease),
    op_rows::Req(Op::kGetRdma, Via::kRdma, kRead, NsAt::kFirst, "get", Op::kGet, true),
    op_rows::Req(Op::kList, Via::kAny, kAdmin, NsAt::kNone, "list", Op::kList),
    op_rows::Req(Op::kPin, Via::kAny, kRead, NsAt::kFirst, "pin", Op::kPin),
    op_rows::Req(Op::kDevicePool, Via::kShm, kRead, NsAt::kNone, "device_pool", Op::kDevicePool,
                 true),
    op_rows::Req(Op::kGetDevice, Via::kShm, kRead, NsAt::kFirst, "get_device", Op::kGetDevice,
                 true),
    op_rows::Req(Op::kVerify, Via::kAny, kAdmin, NsAt::kEvery, "verify", Op::kVerify),
    op_rows::Req(Op::kCompact, Via::kAny, kAdmin, NsAt::kEvery, "compact", Op::kCompact),
    op_rows::Req(Op::kGetShmMany, Via::kShm, kRead, NsAt::kFirst, "get_many", Op::kGetShmMany,
                 true),
    op_rows::Req(Op::kEraseMany, Via::kAny, kWrite, NsAt::kPairs, "erase_many", Op::kEraseMany),
    op_rows::Req(Op::kPutArena, Via::kShm, kWrite, NsAt::kNone, "put_arena", Op::kPutArena),
    op_rows::Req(Op::kPutShm, Via::kShm, kWrite, NsAt::kFirst, "put", Op::kPut),
    op_rows::Req(Op::kPrepareDevicePuts, Via::kShm, kWrite, NsAt::kNone, "prepare_device_puts",
                 Op::kPrepareDevicePuts),
    op_rows::Req(Op::kPutDevice, Via::kShm, kWrite, NsAt::kFirst, "put", Op::kPut),
    op_rows::Req(Op::kGetShmStream, Via::kShm, kRead, NsAt::kFirst, "get_many", Op::kGetShmMany,
                 true),
    op_rows::Req(Op::kPrefetch, Via::kAny, kRead, NsAt::kFirst, "prefetch", Op::kPrefetch),
    op_rows::Req(Op::kClaim, Via::kAny, kRead, NsAt::kFirst, "claim", Op::kClaim),
    op_rows::Req(Op::kPutDeviceMany, Via::kShm, kWrite, NsAt::kFirst, "put", Op::kPut),
    op_rows::Req(Op::kView, Via::kAny, kNoRight, NsAt::kNone, "view", Op::kView),
    op_rows::Reply(Op::kHelloOk),
    op_rows::Reply(Op::kGetOk),
    op_rows::Reply(Op::kLookupOk),
    op_rows::Reply(Op::kOk),
    op_rows::Reply(Op::kStatsOk),
    op_rows::Reply(Op::kGetShmOk),
    op_rows::Reply(Op::kGetRdmaOk),
    op_rows::Reply(Op::kListOk),
    op_rows::Reply(Op::kPinOk),
    op_rows::Reply(Op::kDevicePoolOk),
    op_rows::Reply(Op::kGetDeviceOk),
    op_rows::Reply(Op::kVerifyOk),
    op_rows::Reply(Op::kCompactOk),
    op_rows::Reply(Op::kGetShmManyOk),
    op_rows::Reply(Op::kEraseManyOk),
    op_rows::Reply(Op::kPutArenaOk),
    op_rows::Reply(Op::kGetShmLanded),
    op_rows::Reply(Op::kPutDeviceManyOk),
    op_rows::Reply(Op::kError),
};

namespace op_rows {
// Op value -> its row's index (kNone: not an op), built at compile time.
inline constexpr uint8_t kNone = 0xff;
constexpr std::array<uint8_t, 256> Index() {
  std::array<uint8_t, 256> at{};
  for (auto& a : at) a = kNone;
  for (size_t i = 0; i < std::size(kOpTable); ++i)
    at[static_cast<uint16_t>(kOpTable[i].op)] = static_cast<uint8_t>(i);
  return at;
}
inline constexpr std::array<uint8_t, 256> kIndex = Index();
constexpr bool EveryRequestNamesItsRight() {
  for (const OpRow& r : kOpTable)
    if (r.request && r.right == 0) return false;
  return true;
}
constexpr bool EveryCountedRowIsARequest() {
  for (const OpRow& r : kOpTable) {
    if (!r.request) continue;
    const uint8_t at = kIndex[static_cast<uint16_t>(r.counted_as)];
    if (at == kNone || !kOpTable[at].request) return false;
  }
  return true;
}
static_assert(std::size(kOpTable) < kNone, "the index holds a row number in a byte");
static_assert(EveryRequestNamesItsRight(), "a request row must name its right (or kNoRight)");
static_assert(EveryCountedRowIsARequest(), "a request's metrics go to a request's row");
}  // namespace op_rows

// The op's row, or null where `op` is no op of the protocol.
constexpr const OpRow* FindOp(uint16_t op) {
  if (op >= 256 || op_rows::kIndex[op] == op_rows::kNone) return nullptr;
  return &kOpTable[op_rows::kIndex[op]];
}
constexpr const OpRow* FindOp(Op op) { return FindOp(static_cast<uint16_t>(op)); }

// One past the largest request op: the metrics' rows.
constexpr size_t RequestOpLimit() {
  size_t n = 0;
  for (const OpRow& r : kOpTable)
    if (r.request && static_cast<size_t>(r.op) + 1 > n) n = static_cast<size_t>(r.op) + 1;
  return n;
}

}  // namespace ecstore::net
