#include "server/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <tuple>

#include "net/protocol.h"
#include "net/put_arena.h"
#include "server/admin_requests.h"
#include "server/lease_batch.h"
#include "server/peer_access.h"
#include "server/request_arrival.h"

namespace ecstore::net {
namespace {

constexpr uint64_t kPutPieceBytes = 1 << 20;  // received, then checksummed while in L2
constexpr size_t kMaxHelloBody = 2 + 4096;
constexpr int kRequestsPerTurn = 16;  // then the connection waits its turn again

// A whole frame (request or reply) must move within io_timeout plus its size at 64 MiB/s:
// a peer that trickles bytes cannot hold a connection, a lease or pool space for longer.
Deadline FrameDeadline(std::chrono::milliseconds io_timeout, uint64_t bytes) {
  return std::chrono::steady_clock::now() + io_timeout +
         std::chrono::milliseconds(bytes / ((64ull << 20) / 1000));
}

Status SendFrame(Stream& io, Op op, uint64_t id, const std::string& body,
                 std::span<const uint8_t> payload = {}, Deadline deadline = Deadline::max()) {
  uint8_t hdr[kHeaderBytes];
  EncodeHeader({kVersion, op, id, body.size() + payload.size()}, hdr);
  iovec iov[3] = {{hdr, kHeaderBytes},
                  {const_cast<char*>(body.data()), body.size()},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  return io.Send(iov, payload.empty() ? 2 : 3, "client", deadline);
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(Store* store, const ServerOptions& options) {
  auto hp = ParseHostPort(options.listen);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<Server> s(new Server(store, options));
  // Sockets that never speak get at most a quarter of the slots: the rest stay for clients.
  s->opt_.max_ungreeted =
      std::min(options.max_ungreeted, std::max<size_t>(1, options.max_connections / 4));
  auto gate = Gate::Make(
      {options.token, options.group_access, options.tls, options.acl_file, &s->metrics_});
  if (!gate.ok()) return gate.status();
  s->gate_ = std::move(gate).value();
  bool loopback = false;
  auto fd = Listen(*hp, &s->port_, &loopback);
  if (!fd.ok()) return fd.status();
  // Decided on the address actually bound, not on how the host was spelled.
  if (!loopback && !s->gate_->remote_clients_provable())
    return Status::InvalidArgument("listening on " + hp->host +
                                   " (not a loopback address) needs clients that prove who "
                                   "they are: set ServerOptions::token, an ACL file, or TLS "
                                   "with client certificates required");
  s->listen_fd_ = std::move(fd).value();
  s->device_ipc_ = DeviceIpcGets::Export(store);  // same-host readers open the device pool once
  if (!options.shm_socket.empty()) {
    auto shm = ShmGets::Listen(store, options.shm_socket, options.group_access);
    if (!shm.ok()) return shm.status();
    s->shm_ = std::move(shm).value();
    s->device_puts_.Offered();  // looks for a GPU now (~0.1 s on one), not in a HELLO
  }
  if (!options.rdma_listen.empty()) {
    auto at = ParseHostPort(options.rdma_listen);
    if (!at.ok()) return at.status();
    auto rdma = RdmaGets::Listen(store, *at);
    if (!rdma.ok()) return rdma.status();
    s->rdma_ = std::move(rdma).value();
  }
  Server* p = s.get();
  s->conns_ = std::make_unique<ConnTable>(
      ConnTable::Limits{options.max_connections, s->opt_.max_ungreeted, options.hello_timeout,
                        options.idle_timeout, options.io_timeout, s->LeaseLimits()},
      &s->leases_held_, &s->arena_bytes_);
  const unsigned workers = options.workers
                               ? options.workers
                               : EventLoop::DefaultWorkers(std::thread::hardware_concurrency());
  EC_RETURN_IF_ERROR(s->conns_->Start(
      workers, [p](Conn* c, uint32_t events) REQUIRES(c->turn) { return p->Turn(c, events); }));
  EC_RETURN_IF_ERROR(s->acceptor_.Start(
      s->listen_fd_.get(), s->shm_ ? s->shm_->listener() : -1,
      [p](UniqueFd* fd, std::string peer, bool shm) {
        SetTimeouts(fd->get(), p->opt_.io_timeout);
        return p->conns_->Adopt(fd, std::move(peer), shm);
      },
      [p] {
        p->gate_->ReloadIfChanged();
        p->conns_->Tick(Clock::now());
      }));
  spdlog::info("serving on {}:{} over tcp{} ({}){}", hp->host, s->port_,
               s->gate_->tls() ? "+tls" : "", s->gate_->Describe(),
               options.shm_socket.empty() ? "" : ", shared memory on " + options.shm_socket);
  return s;
}

Server::~Server() { Stop(); }

void Server::Stop() {
  if (stop_.exchange(true)) return;
  ::shutdown(listen_fd_.get(), SHUT_RDWR);
  acceptor_.Stop();
  if (shm_) shm_->Stop();
  if (conns_) conns_->CloseAll();
  prefetcher_.Stop();  // before the store closes
  if (rdma_) rdma_->Stop();
}

const ServerTransport* Server::TransportFor(Op op) const {
  switch (op) {
    case Op::kGet:
      return &tcp_;
    case Op::kGetShm:
      return shm_.get();
    case Op::kGetRdma:
      return rdma_.get();
    case Op::kGetDevice:
      return device_ipc_.get();
    default:
      return nullptr;
  }
}

double Server::uptime_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

Status Server::ReplyError(Conn* c, const FrameHeader& h, const Status& st) {
  c->req.outcome = st.IsNotFound() ? Outcome::kNotFound : Outcome::kError;
  return SendFrame(c->io, Op::kError, h.request_id, ErrorBody(st));
}

void Server::Finish(Conn* c, const FrameHeader& h) {
  const ServerTransport* t = TransportFor(h.op);
  const Wire wire = t && t != &tcp_ ? t->wire() : c->shm ? Wire::kShm : Wire::kTcp;
  c->req.Finish(&metrics_, h, wire, t != nullptr, c->peer, slow_request_ms_.load());
}

// The next frame's header, if it may be served: a malformed one, a reply sent as a request,
// or anything before HELLO but a small HELLO is answered with why, and the connection closes
// (an error). Before HELLO nothing is read past the header: no body, no allocation.
Result<FrameHeader> Server::ReadRequestHeader(Conn* c) {
  const bool greeted = c->greeted;
  Stream& io = c->io;
  uint8_t hdr[kHeaderBytes];
  EC_RETURN_IF_ERROR(io.Recv(hdr, kHeaderBytes, "client"));
  auto h = DecodeHeader(hdr);
  if (!h.ok()) {  // malformed: say why, then hang up
    SendFrame(io, Op::kError, 0, ErrorBody(h.status()));
    spdlog::warn("closing a connection: {}", h.status().ToString());
    return h.status();
  }
  Status refused;
  if (!IsRequest(h->op, c->shm, rdma_ != nullptr)) {
    const OpRow* row = FindOp(h->op);
    refused = Status::InvalidArgument(
        !row || !row->request ? "opcode is a reply, not a request"
        : row->via == Via::kShm
            ? std::string(OpLabel(h->op)) +
                  " is for the same-host unix socket only: connect with unix:PATH (the "
                  "daemon's --dir/serve.sock)"
            : std::string(OpLabel(h->op)) + " needs a server with RDMA (serve --rdma-listen)");
  } else if (!greeted && (h->op != Op::kHello || h->body_len > kMaxHelloBody))
    refused = Status::InvalidArgument(h->op == Op::kHello ? "HELLO body is too large"
                                                          : "send HELLO first");
  if (!refused.ok()) {
    SendFrame(io, Op::kError, h->request_id, ErrorBody(refused));
    return refused;
  }
  return h;
}

// A turn on a worker. An idle client waits on the event loop as long as it likes for its
// next request; only a frame that has arrived (server/request_arrival.h) is read, and each is
// bounded by io_timeout. After kRequestsPerTurn requests the connection waits its turn again.
ConnTable::Next Server::Turn(Conn* c, uint32_t events) {
  using Next = ConnTable::Next;
  if (stop_) return Next::kClose;
  if (c->sending) {  // EPOLLOUT: more of a reply its reader was slow to take
    auto sent = c->sending->Push(c->io.fd(), {}, {});
    if (!sent.ok()) return Next::kClose;
    if (!*sent) return Next::kWrite;
    c->sending.reset();
  }
  if (!c->secured) {  // on the event loop, step by step; it counts against the HELLO deadline
    if (!c->shm && gate_->tls()) {
      auto step = gate_->Secure(&c->io, &c->handshake, c->peer);
      if (!step.ok()) return Next::kClose;
      if (*step == HandshakeStep::kWantRead) return Next::kRead;
      if (*step == HandshakeStep::kWantWrite) return Next::kWrite;
    }
    c->secured = true;
    if (c->io.tls() && !c->io.tls()->ktls_recv())
      c->arrival.set_framing(RequestArrival::kTlsRecords);
    else if (c->io.tls())
      c->arrival.set_framing(RequestArrival::kUnchecked);
  }
  bool hangup = events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR);  // read on: the read says so
  for (int served = 0; served < kRequestsPerTurn; ++served, hangup = false) {
    if (stop_) return Next::kClose;
    if (!hangup && !c->io.Buffered() && !c->arrival.Arrived(c->io.fd(), c->greeted))
      return Next::kRead;
    if (!ServeRequest(c).ok()) return Next::kClose;  // the connection failed or was malformed
    if (c->sending) return Next::kWrite;
  }
  return Next::kRead;
}

// Reads one request and answers it. A non-OK return closes the connection.
Status Server::ServeRequest(Conn* c) {
  auto h = ReadRequestHeader(c);
  if (!h.ok()) return h.status();
  if (c->greeted && gate_->Revoked(&c->who)) {  // an ACL or token change took its proof away
    Status st = Status::PermissionDenied(
        "principal '" + c->who.name +
        "': the proof this connection presented (its secret, certificate or uid) proves no "
        "principal since the ACL or token changed; connect again with a current one");
    ReplyError(c, *h, st);
    return st;  // closes the connection
  }
  const Deadline deadline = FrameDeadline(opt_.io_timeout, h->body_len);
  c->req.Begin();
  c->last_request = Clock::now();
  if (h->op == Op::kPut) {  // streamed straight into a reserved pool block
    Status st = HandlePut(c, *h, deadline);
    Finish(c, *h);
    return st;
  }
  // The worker's, reused across requests and connections: a waiting connection holds none.
  thread_local std::string body;
  body.resize(h->body_len);
  EC_RETURN_IF_ERROR(c->io.Recv(body.data(), body.size(), "client", deadline));
  conns_->Greeted(c);
  Status st = h->op == Op::kHello ? Hello(c, *h, body) : Handle(c, *h, body);
  Finish(c, *h);
  if (body.capacity() > (1u << 20)) std::string().swap(body);
  return st;
}

// Finds the connection's principal (Gate::Identify) and answers HELLO; over the unix socket
// the pool's (read-only, sealed) memfd goes with the reply to a principal that may read every
// namespace. A non-OK return closes the connection.
Status Server::Hello(Conn* c, const FrameHeader& h, const std::string& body) {
  const int fd = c->io.fd();
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  std::string secret;
  r.Str(&secret, 4096);
  auto who = gate_->Identify(c->io, c->shm, secret);
  if (!who.ok()) {
    SendFrame(c->io, Op::kError, h.request_id, ErrorBody(who.status()));
    spdlog::warn("refused a client from {}: {}", c->peer, who.status().message());
    c->req.outcome = Outcome::kError;
    return who.status();
  }
  c->who = std::move(who).value();
  c->maps_pool = gate_->MapsPool(&c->who);
  HelloInfo info;
  info.transport = c->shm && c->maps_pool ? "shm" : "tcp";
  info.features = kFeaturePrefetch | kFeatureClaims;
  // Hand over the pool once, gets then return offsets into it; only to a principal that may
  // read every namespace in it. Others are served by copy over the same socket.
  if (c->shm && c->maps_pool) {
    info.pool_bytes = store_->pool_region().size;
    info.features |= kFeaturePutArena | kFeaturePutLanding | kFeatureStreamedLeases |
                     (device_puts_.Offered() ? kFeaturePutDevice | kFeaturePutDeviceMany : 0);
    std::string b = HelloBody(info);
    uint8_t out[kHeaderBytes];
    EncodeHeader({kVersion, Op::kHelloOk, h.request_id, b.size()}, out);
    iovec iov[2] = {{out, kHeaderBytes}, {b.data(), b.size()}};
    return SendWithFd(fd, iov, 2, store_->pool_region().shm_fd, "client");
  }
  if (shm_) shm_->Advertise(&info);
  if (rdma_ && c->maps_pool) rdma_->Advertise(&info);
  return SendFrame(c->io, Op::kHelloOk, h.request_id, HelloBody(info));
}

// PUT without a staging copy: the key and meta are read first, then the payload lands in a
// reserved pool block. A refused PUT's payload is read and dropped, and the error answered.
Status Server::HandlePut(Conn* c, const FrameHeader& h, Deadline deadline) {
  Stream& io = c->io;
  uint8_t prefix[kPutPrefixMax];
  const size_t n = static_cast<size_t>(std::min<uint64_t>(h.body_len, sizeof(prefix)));
  EC_RETURN_IF_ERROR(io.Recv(prefix, n, "client", deadline));
  BodyReader r(prefix, n);
  auto k = ParseKeyBody(&r);
  TensorMeta meta;
  if (!k.ok() || !r.Meta(&meta)) {  // malformed: answer, then close
    Status st = k.ok() ? Status::InvalidArgument("malformed tensor meta") : k.status();
    ReplyError(c, h, st);
    return st;
  }
  c->req.ns = k->ns;
  c->req.key = k->key;
  const uint64_t in_prefix = r.remaining();
  const uint64_t size = h.body_len - (n - in_prefix);
  // The same check as every op's (the op table's right over the body's namespace).
  const std::string_view head(reinterpret_cast<const char*>(prefix), n);
  Status may = gate_->Check(&c->who, h.op, head);
  if (may.ok()) may = Fenced(h.op, head, c->view_revision);
  auto res = may.ok() ? store_->Reserve(k->ns, k->key, meta, size) : Result<PutReservation>(may);
  if (!res.ok()) {
    EC_RETURN_IF_ERROR(io.Discard(size - in_prefix, "client", deadline));
    return ReplyError(c, h, res.status());
  }
  // Each piece checksummed as it lands, while the client sends the next: hashing after the
  // whole body took the put well below the upload stream's speed (bench `remote`).
  // Where there are cores to spare, a helper checks a piece while this thread receives the
  // next (PieceChecker).
  std::memcpy(res->bytes().data(), r.position(), in_prefix);
  thread_local std::unique_ptr<PieceChecker> worker_checker;  // one helper per worker
  PieceChecker* checker = CheckerFor(worker_checker, check_behind_, size, kPutPieceBytes);
  Stream* from = &io;  // the lambda runs in this turn; the analysis cannot see into it
  EC_RETURN_IF_ERROR(ReceivePieces(
      *res, in_prefix, kPutPieceBytes, checker,
      [&](uint8_t* dst, uint64_t n) { return from->Recv(dst, n, "client", deadline); }));
  Status st = store_->Commit(std::move(res).value());
  return st.ok() ? SendFrame(io, Op::kOk, h.request_id, {}) : ReplyError(c, h, st);
}

LeaseTable::Limits Server::LeaseLimits() const {
  return {opt_.max_leases_per_connection,
          opt_.max_leased_bytes_per_connection ? opt_.max_leased_bytes_per_connection
                                               : store_->pool_region().size / 2,
          opt_.lease_ttl};
}

// A request that reads or writes entries -- one that needs the read or write right (the
// command table, ScopeOf), but the setup of a same-host client's device pool and put arena
// -- waits for the fence.
Status Server::Fenced(Op op, std::string_view body, int64_t view_revision) const {
  if (!opt_.fence || op == Op::kDevicePool || op == Op::kPutArena || op == Op::kPrepareDevicePuts)
    return Status::Ok();
  const RequestScope s = ScopeOf(op, body);
  if (s.right != kRead && s.right != kWrite) return Status::Ok();
  Status st = opt_.fence(view_revision);
  if (st.ok() || opt_.unfenced_namespace.empty()) return st;
  const bool own = !s.malformed && !s.namespaces.empty() &&
                   std::all_of(s.namespaces.begin(), s.namespaces.end(),
                               [&](std::string_view ns) { return ns == opt_.unfenced_namespace; });
  return own ? Status::Ok() : st;
}

// Answers one request. A non-OK return closes the connection.
Status Server::Handle(Conn* c, const FrameHeader& h, std::string& body) {
  BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  auto reply_error = [&](const Status& st) REQUIRES(c->turn) { return ReplyError(c, h, st); };
  // Refused before it touches the store; the connection stays.
  if (Status may = gate_->Check(&c->who, h.op, body); !may.ok()) return reply_error(may);
  if (Status may = Fenced(h.op, body, c->view_revision); !may.ok()) return reply_error(may);
  if (ReadsPoolInPlace(h.op) && !(c->maps_pool && gate_->MapsPool(&c->who)))
    return reply_error(Status::PermissionDenied(
        "principal '" + c->who.name + "' may not read the pool in place (" + OpLabel(h.op) +
        "): a mapping or an rkey shows every namespace, and its read grant does not cover "
        "them all; read by copy (GET), or ask the operator for read on ns=*"));
  switch (h.op) {
    case Op::kGet:
    case Op::kGetShm:
    case Op::kGetRdma:
    case Op::kPin:
    case Op::kGetDevice:
      return HandleGet(c, h, &r);
    case Op::kGetShmMany:
    case Op::kGetShmStream:
      return HandleGetShmMany(c, h, &r);
    case Op::kDevicePool:
      return HandleDevicePool(c, h);
    case Op::kView: {
      uint64_t rev;
      if (!r.U64(&rev)) return Status::InvalidArgument("malformed VIEW");
      c->view_revision = static_cast<int64_t>(rev);
      return Status::Ok();
    }
    case Op::kRelease: {
      uint64_t id;
      if (!r.U64(&id)) return Status::InvalidArgument("malformed RELEASE");
      c->leases.Release(id);  // unknown ids (already expired) are fine
      return Status::Ok();
    }
    case Op::kLookup:
    case Op::kErase:
    case Op::kEraseMany:
    case Op::kPutArena:
    case Op::kPutShm:
    case Op::kPrepareDevicePuts:
    case Op::kPutDevice:
    case Op::kPutDeviceMany:
    case Op::kPrefetch:
    case Op::kClaim:
      return HandleStoreRequest(c, h, &r);
    case Op::kList:
      return HandleList(c, h, &r);
    case Op::kVerify:
    case Op::kCompact:
      return HandleAdmin(c, h);
    case Op::kStats: {
      // The store's one schema, plus how this connection and this server move data.
      auto body = AnswerStats(store_, connections(), leases_held_.load(), c->shm ? "shm" : "tcp",
                              transport(), gate_->TlsJson(c->io.tls()));
      return body.ok() ? SendFrame(c->io, Op::kStatsOk, h.request_id, *body)
                       : reply_error(body.status());
    }
    default:
      reply_error(Status::InvalidArgument("unexpected opcode"));
      return Status::InvalidArgument("unexpected opcode");
  }
}

uint64_t Server::ArenaBudget() const {
  if (opt_.max_arena_bytes > 0) return opt_.max_arena_bytes;
  return std::max<uint64_t>(store_->pool_region().size, 256ull << 20);
}

// LOOKUP, ERASE and ERASE_MANY, PREFETCH, CLAIM, and the same-host puts' requests (PUT_ARENA's
// reply passes the arena's memfd).
Status Server::HandleStoreRequest(Conn* c, const FrameHeader& h, BodyReader* r) {
  auto a = h.op == Op::kPutArena || h.op == Op::kPutShm
               ? AnswerArena({store_, &copier_, opt_.io_timeout, &arena_bytes_, ArenaBudget()},
                             h.op, r, &c->arena, &c->req.ns, &c->req.key, &c->req.bytes_in)
           : h.op == Op::kPrepareDevicePuts || h.op == Op::kPutDevice || h.op == Op::kPutDeviceMany
               ? AnswerDevicePut(&device_puts_, &c->imports, h.op, r, &c->req.ns, &c->req.key,
                                 &c->req.bytes_in)
           : h.op == Op::kPrefetch ? AnswerPrefetch(&prefetcher_, r)
           : h.op == Op::kClaim    ? AnswerClaim(&claims_, store_, r, c->id)
                                   : AnswerKeys(store_, h.op, r);
  if (!a.ok()) {  // malformed: answer, then close
    ReplyError(c, h, a.status());
    return a.status();
  }
  if (!a->error.ok()) return ReplyError(c, h, a->error);
  if (a->op != Op::kPutArenaOk) return SendFrame(c->io, a->op, h.request_id, a->body);
  uint8_t out[kHeaderBytes];
  EncodeHeader({kVersion, a->op, h.request_id, a->body.size()}, out);
  iovec iov[2] = {{out, kHeaderBytes}, {a->body.data(), a->body.size()}};
  return SendWithFd(c->io.fd(), iov, 2, c->arena->fd(), "client");
}

// VERIFY and COMPACT: the store's own, run on this connection's thread (the client waits).
Status Server::HandleAdmin(Conn* c, const FrameHeader& h) {
  auto body = AnswerAdmin(store_, h.op, c->peer);
  if (!body.ok()) return ReplyError(c, h, body.status());
  return SendFrame(c->io, h.op == Op::kVerify ? Op::kVerifyOk : Op::kCompactOk, h.request_id,
                   *body);
}

// A get through its transport (GET, GET_SHM, GET_RDMA, GET_DEVICE), or PIN (a lease on the
// host copy kept in the connection's table, and no location).
// The lease keeps eviction away from these bytes until they are sent (TCP) or the reader
// releases them, or the lease TTL passes.
Status Server::HandleGet(Conn* c, const FrameHeader& h, BodyReader* r) {
  auto reply_error = [&](const Status& st) REQUIRES(c->turn) { return ReplyError(c, h, st); };
  auto k = ParseKeyBody(r);
  if (!k.ok()) {  // malformed: answer, then close
    reply_error(k.status());
    return k.status();
  }
  const ServerTransport* t = TransportFor(h.op);  // null: PIN
  if (h.op == Op::kGetDevice && !t) return reply_error(DeviceIpcGets::NoPool());
  c->req.ns = k->ns;
  c->req.key = k->key;
  auto lease = t ? t->Acquire(store_, k->ns, k->key) : store_->Acquire(k->ns, k->key);
  if (!lease.ok()) return reply_error(lease.status());
  c->req.served_from = lease->served_from();
  if (t) c->req.bytes_out = lease->size();
  const EntryInfo e = lease->info();  // a copy: the lease moves into the table below
  BodyWriter w;
  if (t && t->sends_bytes()) {  // straight from pinned pool memory, one sendmsg
    BodyWriter inner;
    WriteInfo(&inner, e);
    w.U32(static_cast<uint32_t>(inner.data().size()));
    w.Raw(inner.data().data(), inner.data().size());
    // The whole reply has a deadline: a slow reader cannot hold the lease past it.
    const Deadline by = FrameDeadline(opt_.io_timeout, lease->size());
    if (c->io.tls())
      return SendFrame(c->io, t->reply(), h.request_id, w.data(), lease->bytes(), by);
    // In the clear, a reader that stops keeping up is left to the event loop with the rest,
    // and the worker goes on to other clients.
    std::string head(kHeaderBytes, '\0');
    EncodeHeader({kVersion, t->reply(), h.request_id, w.data().size() + lease->size()},
                 reinterpret_cast<uint8_t*>(head.data()));
    head += w.data();
    const auto budget = Outbox::InlineBudget(lease->size());
    auto out = std::make_unique<Outbox>(std::move(head), std::move(lease).value(), by);
    auto sent = out->Push(c->io.fd(), std::chrono::milliseconds(5), budget);
    if (!sent.ok()) return sent.status();
    if (!*sent) c->sending = std::move(out);
    return Status::Ok();
  }
  BodyWriter where;
  if (t) t->Locate(*lease, &where);
  auto id = c->leases.Add(std::move(lease).value());  // Busy when the table is full
  if (!id.ok()) return reply_error(id.status());
  w.U64(*id);
  w.Raw(where.data().data(), where.data().size());
  WriteInfo(&w, e);
  return SendFrame(c->io, t ? t->reply() : Op::kPinOk, h.request_id, w.data());
}

// GET_SHM_MANY and GET_SHM_STREAM (server/lease_batch.h), the leases kept in the connection's
// table. A key that is not found does not make the request an error.
Status Server::HandleGetShmMany(Conn* c, const FrameHeader& h, BodyReader* r) {
  LeaseBatchTally tally;
  // A reader that stops reading holds up the batch's reads (and other readers waiting on
  // their entries) for at most io_timeout: then no more frames are sent to it.
  Stream* io = &c->io;
  auto tell = [&](const std::string& body) {
    return SendFrame(*io, Op::kGetShmLanded, h.request_id, body, {},
                     FrameDeadline(opt_.io_timeout, body.size()));
  };
  auto a = AnswerLeaseBatch(store_, &c->leases, h.op, r, tell, &tally);
  c->req.bytes_out = tally.bytes_out;
  if (!a.ok()) {  // malformed: answer, then close
    ReplyError(c, h, a.status());
    return a.status();
  }
  if (tally.failed) c->req.outcome = Outcome::kError;
  // A stream of one key is a client's Get: counted as one, its outcome and tier with it.
  c->req.one_key_stream = h.op == Op::kGetShmStream && tally.keys == 1;
  if (c->req.one_key_stream && tally.not_found) c->req.outcome = Outcome::kNotFound;
  if (c->req.one_key_stream) c->req.served_from = tally.served_from;
  c->req.ns = tally.ns;
  c->req.key = tally.keys == 1
                   ? tally.first_key
                   : tally.first_key + " and " + std::to_string(tally.keys - 1) + " more";
  return SendFrame(c->io, a->op, h.request_id, a->body);
}

// The device pool's CUDA IPC handle, for a same-host reader to open once.
Status Server::HandleDevicePool(Conn* c, const FrameHeader& h) {
  if (!device_ipc_) return ReplyError(c, h, DeviceIpcGets::NoPool());
  return SendFrame(c->io, Op::kDevicePoolOk, h.request_id,
                   device_ipc_->PoolBody(store_->device_ordinal()));
}

Status Server::HandleList(Conn* c, const FrameHeader& h, BodyReader* r) {
  uint32_t offset, limit;
  if (!r->U32(&offset) || !r->U32(&limit) || limit == 0 || limit > kListPage) {
    Status st = Status::InvalidArgument("LIST takes offset and 1.." + std::to_string(kListPage));
    ReplyError(c, h, st);
    return st;
  }
  auto page = c->listing.Page(store_, offset, limit,
                              [&](const std::string& ns) { return gate_->MayList(&c->who, ns); });
  if (!page.ok()) {
    ReplyError(c, h, page.status());
    return page.status();
  }
  return SendFrame(c->io, Op::kListOk, h.request_id, *page);
}

}  // namespace ecstore::net
