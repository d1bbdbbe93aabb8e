#include "net/connection.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "rdma/verbs.h"

namespace ecstore::net {

Connection::~Connection() = default;

// HELLO; over the unix socket the reply carries the pool's memfd (*pool_fd, owned by the
// caller).
Status Connection::Hello(HelloInfo* info, int* pool_fd) {
  BodyWriter w;
  w.Str(opt_.token);
  EC_RETURN_IF_ERROR(SendRequest(Op::kHello, w.data()));
  auto body = conn_.ReadReply(Op::kHelloOk, unix_ ? pool_fd : nullptr);
  if (!body.ok()) return body.status();
  BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
  if (!ParseHelloBody(&r, info)) return Status::Unavailable("server sent a malformed HELLO_OK");
  return Status::Ok();
}

// The data path (ChooseTransport): the server's memory in place when it is on this host and
// passed its pool (shared memory); one-sided reads when both ends have RDMA; else TCP. Over
// TCP to a loopback server offering shared memory, TCP for now: Open switches to its socket.
Status Connection::ChooseTransport(const HelloInfo& info, int pool_fd) {
  transport_.reset();
  features_ = info.features;
  TransportOffer offer{.same_host = unix_ || IsLoopback(hp_.host),
                       .shm = unix_ ? pool_fd >= 0 : !info.shm_path.empty(),
                       .rdma = !unix_ && !info.rdma_addr.empty()};
  offer.rdma_device = offer.rdma && !offer.same_host && opt_.transport == TransportKind::kAuto &&
                      rdma::RdmaDevicePresent();  // looked for only where it decides
  if (unix_ && pool_fd < 0 && opt_.transport == TransportKind::kShm)
    return Status::PermissionDenied(
        "transport shm: the server did not pass its pool to this client: it does so only to a "
        "principal whose read grant covers every namespace (docs/security.md); leave the "
        "transport to choose (copies over the same socket)");
  auto use = net::ChooseTransport(offer, opt_.transport);
  if (!use.ok()) return use.status();
  if (*use == TransportKind::kShm && unix_) {
    const uint32_t arena =
        kFeaturePutArena | kFeaturePutLanding | kFeaturePutDevice | kFeaturePutDeviceMany;
    auto t =
        NewShmTransport(pool_fd, info.pool_bytes,
                        opt_.put_arena ? info.features : info.features & ~arena, arena_registrar_);
    if (!t.ok()) return t.status();
    transport_ = std::move(t).value();
  } else if (*use == TransportKind::kRdma) {
    auto t = NewRdmaTransport(info.rdma_addr, opt_.rdma_bounce_bytes, opt_.timeout, rdma_reads_);
    if (t.ok())
      transport_ = std::move(t).value();
    else if (opt_.transport == TransportKind::kRdma)
      return t.status();
    else
      spdlog::warn("RDMA unavailable ({}); using TCP", t.status().ToString());
  }
  switch_to_shm_ = *use == TransportKind::kShm && !unix_ && !opt_.tls;
  if (!transport_) transport_ = NewTcpTransport();
  for (const BufferDesc& m : registered_) EC_RETURN_IF_ERROR(transport_->RegisterMemory(m));
  return Status::Ok();
}

void Connection::Abandon() {
  if (conn_.valid() && conn_.sends_whole()) parked_ = conn_.Take();
  conn_.reset();
}

void Connection::End() {
  UniqueFd control = conn_.valid() && conn_.sends_whole() ? conn_.Take() : std::move(parked_);
  conn_.reset();
  parked_.reset();
  if (leases_ && leases_->outstanding() > 0) {
    leases_->Retire(std::move(transport_), std::move(control));
    retired_.push_back(std::move(leases_));
  }
  transport_.reset();
  ReadLease::Releaser* live = this;  // RELEASE on the connection while it is current
  leases_ = std::make_unique<LeaseGeneration>(live, [this](LeaseGeneration* done) {
    std::erase_if(retired_, [done](const auto& g) { return g.get() == done; });
  });
}

Status Connection::Open() {
  End();
  auto connect_timeout = opt_.connect_timeout.count() > 0 ? opt_.connect_timeout : opt_.timeout;
  auto fd = unix_ ? ConnectUnix(unix_path_, opt_.timeout) : ConnectTcp(hp_, connect_timeout);
  if (!fd.ok()) return fd.status();
  if (!unix_) SetTimeouts(fd->get(), opt_.timeout);
  conn_.Adopt(std::move(fd).value());
  HelloInfo info;
  int passed = -1;
  Status st = !unix_ && opt_.tls ? StartTls(conn_.fd()) : Status::Ok();
  if (st.ok()) st = Hello(&info, &passed);
  UniqueFd pool_fd(passed);
  if (st.ok()) st = ChooseTransport(info, pool_fd.get());
  if (!st.ok()) {
    End();
    return st;
  }
  if (view_ != 0) {
    BodyWriter w;
    w.U64(static_cast<uint64_t>(view_));
    if (st = SendRequest(Op::kView, w.data()); !st.ok()) {
      End();
      return st;
    }
  }
  // Same host (loopback) and the server offers shared memory: switch to it.
  if (switch_to_shm_) {
    UniqueFd tcp = conn_.Take();
    auto tcp_transport = std::move(transport_);
    unix_ = true;
    unix_path_ = info.shm_path;
    if (Open().ok()) return Status::Ok();
    unix_ = false;  // not reachable from here after all: stay on TCP
    conn_.Adopt(std::move(tcp));
    transport_ = std::move(tcp_transport);
  }
  return Status::Ok();
}

// The handshake, the server's certificate checked against the CA and the name; the context
// is made once and kept across reconnects.
Status Connection::StartTls(int fd) {
  if (!tls_ctx_) {
    auto ctx = TlsContext::ForClient(*opt_.tls);
    if (!ctx.ok()) return ctx.status();
    tls_ctx_ = std::move(ctx).value();
  }
  auto timeout = opt_.connect_timeout.count() > 0 ? opt_.connect_timeout : opt_.timeout;
  auto s = TlsSession::Connect(tls_ctx_, fd, hp_.host, std::chrono::steady_clock::now() + timeout);
  if (!s.ok()) return s.status().WithContext(hp_.host + ":" + std::to_string(hp_.port));
  conn_.SetTls(std::move(s).value());
  return Status::Ok();
}

Status Connection::RegisterMemory(const BufferDesc& memory) {
  if (transport_) EC_RETURN_IF_ERROR(transport_->RegisterMemory(memory));
  registered_.push_back(memory);
  return Status::Ok();
}

bool Connection::WritesDirectly(const BufferDesc& memory) const {
  if (!transport_ || !transport_->caps().one_sided_read) return false;
  return std::any_of(registered_.begin(), registered_.end(), [&](const BufferDesc& m) {
    return m.kind == memory.kind && memory.data >= m.data &&
           memory.data + memory.size <= m.data + m.size;
  });
}

bool Connection::InRegisteredDevice(std::span<const uint8_t> p) const {
  return std::any_of(registered_.begin(), registered_.end(), [&](const BufferDesc& m) {
    return m.on_device() && p.data() >= m.data && p.data() + p.size() <= m.data + m.size;
  });
}

void Connection::UnregisterMemory(const BufferDesc& memory) {
  if (transport_) transport_->UnregisterMemory(memory);
  std::erase_if(registered_, [&](const BufferDesc& m) {
    return m.data == memory.data && m.size == memory.size;
  });
}

Status Connection::SetArenaRegistrar(std::shared_ptr<MemoryRegistrar> registrar) {
  arena_registrar_ = std::move(registrar);
  return transport_ ? transport_->SetArenaRegistrar(arena_registrar_) : Status::Ok();
}

Status Connection::SetView(int64_t revision) {
  if (revision == view_) return Status::Ok();
  view_ = revision;
  if (!valid()) return Status::Ok();  // sent by the next Open
  BodyWriter w;
  w.U64(static_cast<uint64_t>(revision));
  return SendRequest(Op::kView, w.data());
}

Status Connection::SendRequest(Op op, const std::string& body, std::span<const uint8_t> payload) {
  return conn_.Send(op, body, payload);
}
Result<std::string> Connection::ReadReply(Op expect, int* passed_fd) {
  return conn_.ReadReply(expect, passed_fd);
}

Result<std::string> Connection::ReadReplyOrNote(Op expect, Op note, bool* is_note) {
  return conn_.ReadReplyOrNote(expect, note, is_note);
}
bool Connection::InputWaiting() {
  if (conn_.Buffered()) return true;
  pollfd p{conn_.fd(), POLLIN, 0};
  return conn_.valid() && ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

Status Connection::ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                                EntryInfo* info) {
  return conn_.ReadGetReply(dst_for, info);
}

void Connection::Release(void* token) {
  // No reply; a lost RELEASE (the connection died) is covered by the server's lease TTL and
  // by its dropping a connection's leases when the connection closes.
  (void)conn_.SendRelease(token);
}

bool AbandonIfUnknownOp(Connection* link, const Status& st) {
  if (st.message().find("unknown opcode") == std::string::npos) return false;
  link->Abandon();
  return true;
}

}  // namespace ecstore::net
