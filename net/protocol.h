// The ec-store wire protocol, shared by every transport.
//
// A frame is a fixed 24-byte header followed by `body_len` bytes:
//   magic u32 "ECS1" | version u16 | opcode u16 | request_id u64 | body_len u64
// Bodies are built from little-endian integers and u16-length-prefixed strings
// (BodyWriter / BodyReader). A GET reply's tensor bytes follow its meta in the same body,
// so a sender can hand the kernel pool memory directly (one sendmsg with an iovec).
//
// Limits: metadata bodies ≤ 1 MiB; a body carrying a tensor ≤ kMaxPayload. A frame that
// breaks a rule is answered with an ERROR frame and the connection is closed.
// Thread rules: pure functions and value types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor_meta.h"
#include "cache/cache.h"

namespace ecstore::net {

inline constexpr uint32_t kMagic = 0x31534345;  // "ECS1"
// 2: an entry's info carries its tier set (bits: 1 device, 2 pool, 4 disk) where 1 sent
// its tier and an on-disk flag.
inline constexpr uint16_t kVersion = 2;
inline constexpr size_t kHeaderBytes = 24;
inline constexpr uint64_t kMaxMetaBody = 1ull << 20;
inline constexpr uint64_t kMaxPayload = 1ull << 30;
inline constexpr uint32_t kMaxBatch = 1024;
inline constexpr uint32_t kListPage = 2048;  // entries per LIST reply: stays under 1 MiB
// Keys per GET_SHM_MANY: its reply, an error message of up to 4 KiB each, stays under 1 MiB.
inline constexpr uint32_t kMaxLeaseBatch = 128;

enum class Op : uint16_t {
  kHello = 1,    // token            -> kHelloOk(server version, transport) | kError
  kGet = 2,      // ns, key          -> kGetOk(meta, bytes) | kError
  kLookup = 3,   // n x (ns, key)    -> kLookupOk(n x found, info)
  kPut = 4,      // ns, key, meta, bytes -> kOk | kError
  kErase = 5,    // ns, key          -> kOk | kError
  kStats = 6,    //                  -> kStatsOk(json)
  kGetShm = 7,   // ns, key          -> kGetShmOk(lease id, pool offset, info) | kError
  kRelease = 8,  // lease id         -> (no reply)
  kGetRdma = 9,  // ns, key          -> kGetRdmaOk(lease id, remote addr, rkey, info) | kError
  kList = 10,    // offset, limit    -> kListOk(n, more, n x (ns, key, info)); ordered by ns, key
  kPin = 11,     // ns, key          -> kPinOk(lease id, info) | kError: no bytes move
  // Same host only (the unix socket), a server with a device tier: the device pool's CUDA
  // IPC handle, asked for once; then leases of device entries as offsets into it.
  kDevicePool = 12,  //              -> kDevicePoolOk(gpu u32, bytes u64, handle) | kError
  kGetDevice = 13,   // ns, key      -> kGetDeviceOk(lease id, pool offset, info) | kError
  // Administration (a server's whole store): run on the server, answered with JSON.
  kVerify = 14,   //                 -> kVerifyOk(json {checked, bytes, corrupt, errors})
  kCompact = 15,  //                 -> kCompactOk(json {before, after}) | kError
  // Same host: several entries of one namespace leased together (the server reads those
  // on disk only in one batch), each answered as GET_SHM would be, or with its own error.
  kGetShmMany = 16,  // ns, n, n x key -> kGetShmManyOk(n x (ok u8, then lease id, pool
                     //                   offset, info; or error code, message)) | kError
  // Entries of any namespaces erased together: their tombstones in one durable write (one
  // fdatasync). `durable` 0 means erased from memory, but the tombstones are not durable yet
  // (the status says why; NoSpace on a full disk), as Store::EraseMany returns it.
  kEraseMany = 17,  // n x (ns, key) -> kEraseManyOk(n, n x erased u8, durable u8[, error
                    //                  code, message]) | kError (a bad key: nothing erased)
  // Same host only (the unix socket), a server whose HELLO_OK offers kFeaturePutArena: puts
  // without the socket (net/put_arena.h). PUT_ARENA gives the connection a put arena of at
  // least `bytes` (a memfd the client writes and the server maps read-only, passed with the
  // reply); PUT_SHM puts [offset, offset + size) of it, copied by the server into the pool.
  kPutArena = 18,  // bytes u64      -> kPutArenaOk(bytes u64) + the memfd | kError
  kPutShm = 19,    // ns, key, meta, offset u64, size u64, flags u8 -> kOk | kError
  // Same host, a server whose HELLO_OK offers kFeaturePutDevice: puts of a client's CUDA
  // memory that the server copies itself, opening the allocation by its IPC handle
  // (net/device_put.h). PREPARE_DEVICE_PUTS registers the server's pool with CUDA ahead of
  // the first.
  kPrepareDevicePuts = 20,  //       -> kOk | kError
  kPutDevice = 21,          // ns, key, meta, bus id, handle, buffer id u64, offset u64, size u64,
                            // flags u8 -> kOk | kError
  // Same host, a server whose HELLO_OK offers kFeatureStreamedLeases: GET_SHM_MANY whose disk
  // reads are told as they land, so the client copies each piece out while the rest are
  // read. Zero or more GET_SHM_LANDED frames (key index u32, pool offset u64, bytes landed
  // u64: in order per key, not yet checked), then GET_SHM_MANY_OK, where an item's ok byte is
  // kLeaseStreamed for a lease of exactly the bytes its GET_SHM_LANDED frames told of.
  kGetShmStream = 22,  // ns, n, n x key -> n x kGetShmLanded ... then kGetShmManyOk | kError
  // A server whose HELLO_OK offers kFeaturePrefetch, on any connection: a hint that these
  // keys will be read soon. Queued (the server's prefetcher reads their disk-only entries
  // into the pool in one batch, as Store::Prefetch does) and answered at once: queued u8
  // (0: the queue was full and the hint was dropped). A bad key queues nothing.
  kPrefetch = 23,  // ns, n, n x key -> kOk(queued u8) | kError
  // A server whose HELLO_OK offers kFeatureClaims, on any connection: a claim on a key not
  // stored yet, so that one of several engines missing it computes it (server/claim_table.h).
  kClaim = 24,  // ns, key, ttl ms u32 -> kOk(outcome u8: granted/held/present, ms left u32)
  // Same host, a server whose HELLO_OK offers kFeaturePutDeviceMany: a step's device puts in
  // one request (net/device_put.h). The server enqueues every copy on one stream, waits once
  // and commits each; an item's failure is its own.
  kPutDeviceMany = 25,  // ns, flags u8, n u32, n x (key, meta, bus id, handle, buffer id u64,
                        // offset u64, size u64) -> kPutDeviceManyOk(n u32, n x (ok u8, or 0
                        // then error code, message)) | kError
  // A cluster client, on any connection: the etcd revision of the view of the members its
  // next requests route by (again after each reconnect). A cluster node refuses a request
  // that reads or writes entries where its own confirmed view changed after that revision.
  kView = 26,  // revision i64 -> (no reply)
  kHelloOk = 101,
  kGetOk = 102,
  kLookupOk = 103,
  kOk = 104,
  kStatsOk = 106,
  kGetShmOk = 107,
  kGetRdmaOk = 109,
  kListOk = 110,
  kPinOk = 111,
  kDevicePoolOk = 112,
  kGetDeviceOk = 113,
  kVerifyOk = 114,
  kCompactOk = 115,
  kGetShmManyOk = 116,
  kEraseManyOk = 117,
  kPutArenaOk = 118,
  kGetShmLanded = 119,
  kPutDeviceManyOk = 120,
  kError = 200,  // code u16, message
};
bool IsKnownOp(uint16_t op);

struct FrameHeader {
  uint16_t version = kVersion;
  Op op = Op::kError;
  uint64_t request_id = 0;
  uint64_t body_len = 0;
};

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderBytes]);
// InvalidArgument for a bad magic, an unsupported version, an unknown opcode, or a body
// over the limit for that opcode.
Result<FrameHeader> DecodeHeader(const uint8_t in[kHeaderBytes]);

class BodyWriter {
 public:
  void U8(uint8_t v) { Raw(&v, 1); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void U32(uint32_t v) { Raw(&v, 4); }
  void U64(uint64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Str(std::string_view s);  // u16 length + bytes; callers keep strings < 64 KiB
  void Meta(const TensorMeta& m);
  void Raw(const void* p, size_t n) { buf_.append(static_cast<const char*>(p), n); }
  const std::string& data() const { return buf_; }

 private:
  std::string buf_;
};

class BodyReader {
 public:
  BodyReader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U16(uint16_t* v) { return Raw(v, 2); }
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool F64(double* v) { return Raw(v, 8); }
  bool Str(std::string* s, size_t max_len);
  bool Meta(TensorMeta* m);
  bool Raw(void* out, size_t n);
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* position() const { return p_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// HELLO_OK: what the server offers. Over TCP, shm_path names the same-host socket a local
// client may switch to; over that socket, pool_bytes is the size of the passed memfd.
// HELLO_OK's feature bits: requests a server answers beyond those of kVersion (an older
// server sends none, and a client then does without).
inline constexpr uint32_t kFeaturePutArena = 1;        // PUT_ARENA and PUT_SHM
inline constexpr uint32_t kFeaturePutLanding = 2;      // PUT_SHM's kPutLanding
inline constexpr uint32_t kFeaturePutDevice = 4;       // PREPARE_DEVICE_PUTS and PUT_DEVICE
inline constexpr uint32_t kFeatureStreamedLeases = 8;  // GET_SHM_STREAM
inline constexpr uint32_t kFeaturePrefetch = 16;       // PREFETCH (any connection)
inline constexpr uint32_t kFeatureClaims = 32;         // CLAIM (any connection)
inline constexpr uint32_t kFeaturePutDeviceMany = 64;  // PUT_DEVICE_MANY
// A GET_SHM_MANY_OK item's ok byte: 0 an error follows, 1 a lease, kLeaseStreamed a lease of
// the bytes GET_SHM_LANDED told of (GET_SHM_STREAM only).
inline constexpr uint8_t kLeaseStreamed = 2;
// PUT_SHM's (and PUT_DEVICE's) flags.
inline constexpr uint8_t kPutChecksumWhenSpilled = 1;  // PutReservation::ChecksumWhenSpilled
// The block is still landing: the body ends with the arena offset of a u64 counting the
// block's bytes landed so far (net/put_arena.h, LandingCounter); the server copies them as
// they land.
inline constexpr uint8_t kPutLanding = 2;

struct HelloInfo {
  uint16_t version = kVersion;
  std::string transport;
  uint64_t pool_bytes = 0;
  std::string shm_path;
  std::string rdma_addr;  // "IP:PORT" of the server's rdma_cm listener, when it has one
  uint32_t features = 0;  // kFeature* bits; appended, so older peers ignore it
};
std::string HelloBody(const HelloInfo& h);
bool ParseHelloBody(BodyReader* r, HelloInfo* h);

// A server's reply to send: its opcode and body, or the error to answer instead (the
// connection stays open).
struct Answer {
  Status error;
  Op op = Op::kOk;
  std::string body;
};

// Request bodies that every transport parses the same way.
struct KeyRef {
  std::string ns, key;
};
Result<KeyRef> ParseKeyBody(BodyReader* r);                  // GET / ERASE
Result<std::vector<KeyRef>> ParseLookupBody(BodyReader* r);  // LOOKUP / ERASE_MANY
// ERASE_MANY of ns_keys[at, at + n): (namespace, key) pairs, as ParseLookupBody reads them.
std::string EraseManyBody(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                          size_t at, size_t n);
// ERASE_MANY_OK: which entries were erased, and whether their tombstones are durable.
std::string EraseManyReplyBody(const std::vector<bool>& erased, const Status& durable);
// Sets erased (n flags) and *durable; Unavailable when the body is malformed.
Status ParseEraseManyReply(BodyReader* r, size_t n, std::vector<bool>* erased, Status* durable);
// Whether `op` is a request a server answers on this kind of connection (shared-memory and
// RDMA requests only on those), not a reply or an opcode of another socket.
bool IsRequest(Op op, bool shm, bool rdma);
// Whether the op reads the pool in place (a mapping, the device pool, an rkey): what only a
// principal whose read grant covers every namespace may do.
bool ReadsPoolInPlace(Op op);
// GET_SHM_MANY: one namespace, 1..kMaxLeaseBatch keys (each checked by the store, which
// answers a bad one in its own item).
struct KeysRef {
  std::string ns;
  std::vector<std::string> keys;
};
std::string KeysBody(std::string_view ns, const std::vector<std::string>& keys);
Result<KeysRef> ParseKeysBody(BodyReader* r);
// A PUT's body before its bytes (ns, key, meta), once the put is checked (InvalidArgument).
Result<std::string> PutHeadBody(std::string_view ns, std::string_view key, const TensorMeta& meta,
                                uint64_t size);
// LIST_OK: at most `limit` entries, and whether more follow. Unavailable when malformed.
Status ParseListReply(const std::string& body, uint32_t limit, std::vector<EntryInfo>* out,
                      bool* more);
// The JSON of a STATS_OK, VERIFY_OK or COMPACT_OK body (u32 length + JSON), unparsed.
Result<std::string_view> JsonReplyText(const std::string& body);
std::string ErrorBody(const Status& st);
Status ParseErrorBody(BodyReader* r);
void WriteInfo(BodyWriter* w, const EntryInfo& e);
bool ReadInfo(BodyReader* r, EntryInfo* e);

// Whether a HELLO's token is the server's, in time that depends on their lengths only:
// where the first difference lies must not be measurable by a client trying tokens.
bool SameToken(const std::string& given, const std::string& secret);

}  // namespace ecstore::net
