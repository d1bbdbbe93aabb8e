#include "rdma/verbs.h"

#include <arpa/inet.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>

#include "rdma/verbs_api.h"

namespace ecstore::rdma {

using net::HostPort;
namespace {

constexpr int kMaxWr = 64;

// The loaded verbs: only called once Loaded() said they are there (every object here is made
// after that).
const VerbsApi& V() { return *Verbs(); }

Status Loaded() {
  std::string why;
  if (Verbs(&why)) return Status::Ok();
  return Status::Unavailable("RDMA is unavailable: " + why);
}
constexpr int kDepth = 16;  // RDMA READs in flight per QP (initiator depth)

Result<sockaddr_in> Addr(const HostPort& hp) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  if (inet_pton(AF_INET, hp.host.c_str(), &sa.sin_addr) != 1)
    return Status::InvalidArgument("RDMA address must be a numeric IPv4 address, got '" + hp.host +
                                   "'");
  return sa;
}

// Waits for the next rdma_cm event, which must be `want`.
Status WaitEvent(rdma_event_channel* ec, rdma_cm_event_type want, std::chrono::milliseconds timeout,
                 const char* step) {
  pollfd p{ec->fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
    return Status::Unavailable(std::string("RDMA ") + step + " timed out");
  rdma_cm_event* ev = nullptr;
  if (V().rdma_get_cm_event(ec, &ev) != 0) return Status::FromErrno(errno, "rdma_get_cm_event");
  rdma_cm_event_type got = ev->event;
  int status = ev->status;
  V().rdma_ack_cm_event(ev);
  if (got != want)
    return Status::Unavailable(std::string("RDMA ") + step + " failed: " + V().rdma_event_str(got) +
                               " (status " + std::to_string(status) + ")");
  return Status::Ok();
}

ibv_qp_init_attr QpAttr(ibv_cq* cq) {
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = kMaxWr;
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.sq_sig_all = 1;
  return qa;
}

}  // namespace

bool RdmaDevicePresent() {
  if (!Verbs()) return false;
  int n = 0;
  ibv_device** list = V().ibv_get_device_list(&n);
  if (list) V().ibv_free_device_list(list);
  return n > 0;
}

Result<std::unique_ptr<RdmaListener>> RdmaListener::Start(const HostPort& at) {
  auto sa = Addr(at);
  if (!sa.ok()) return sa.status();
  EC_RETURN_IF_ERROR(Loaded());
  std::unique_ptr<RdmaListener> l(new RdmaListener());
  l->ec_ = V().rdma_create_event_channel();
  if (!l->ec_) return Status::Unavailable("rdma_create_event_channel failed: no RDMA support");
  if (V().rdma_create_id(l->ec_, &l->listen_id_, nullptr, RDMA_PS_TCP) != 0)
    return Status::FromErrno(errno, "rdma_create_id");
  if (V().rdma_bind_addr(l->listen_id_, reinterpret_cast<sockaddr*>(&*sa)) != 0)
    return Status::Unavailable("cannot bind RDMA to " + at.host + ": " + std::strerror(errno));
  if (!l->listen_id_->verbs)
    return Status::Unavailable(
        "no RDMA device serves " + at.host +
        "; give ServerOptions::rdma_listen an address of an RDMA (RoCE/IB) port");
  if (V().rdma_listen(l->listen_id_, 64) != 0) return Status::FromErrno(errno, "rdma_listen");
  l->port_ = ntohs(V().rdma_get_src_port(l->listen_id_));
  l->pd_ = V().ibv_alloc_pd(l->listen_id_->verbs);
  if (!l->pd_) return Status::Unavailable("ibv_alloc_pd failed");
  l->thread_ = std::thread([p = l.get()] { p->EventLoop(); });
  spdlog::info("RDMA verbs on {}:{} (device {})", at.host, l->port_,
               V().ibv_get_device_name(l->listen_id_->verbs->device));
  return l;
}

// The one registration of the pool: every get is a remote read of it.
Status RdmaListener::Register(const MemoryRegion& pool) {
  if (pool_mr_) return Status::InvalidArgument("an RDMA listener registers one pool");
  pool_mr_ =
      (V().ibv_reg_mr)(pd_, pool.base, pool.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!pool_mr_) return Status::FromErrno(errno, "ibv_reg_mr");
  spdlog::info("RDMA: pool of {} bytes registered once (rkey {:#x})", pool.size, pool_mr_->rkey);
  return Status::Ok();
}

void RdmaListener::Deregister(const MemoryRegion&) {
  if (pool_mr_) V().ibv_dereg_mr(pool_mr_);
  pool_mr_ = nullptr;
}

uint32_t RdmaListener::rkey() const { return pool_mr_ ? pool_mr_->rkey : 0; }

Status RdmaListener::RegisterDevice(const MemoryRegion& pool, int dmabuf_fd) {
  if (device_mr_) return Status::InvalidArgument("an RDMA listener registers one device pool");
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  std::string why;
  if (dmabuf_fd >= 0 && V().ibv_reg_dmabuf_mr) {
    device_mr_ = V().ibv_reg_dmabuf_mr(pd_, 0, pool.size, reinterpret_cast<uint64_t>(pool.base),
                                       dmabuf_fd, access);
    if (!device_mr_) why = std::string("ibv_reg_dmabuf_mr: ") + std::strerror(errno) + "; ";
  }
  if (!device_mr_) device_mr_ = (V().ibv_reg_mr)(pd_, pool.base, pool.size, access);  // peer memory
  if (!device_mr_)
    return Status::Unavailable("the NIC cannot register GPU memory (" + why +
                               "ibv_reg_mr of device memory: " + std::strerror(errno) +
                               "; GPUDirect RDMA needs dma-buf support or nvidia-peermem)");
  spdlog::info("RDMA: device pool of {} bytes registered once (GPUDirect, rkey {:#x})", pool.size,
               device_mr_->rkey);
  return Status::Ok();
}

void RdmaListener::DeregisterDevice() {
  if (device_mr_) V().ibv_dereg_mr(device_mr_);
  device_mr_ = nullptr;
}

uint32_t RdmaListener::device_rkey() const { return device_mr_ ? device_mr_->rkey : 0; }

void RdmaListener::EventLoop() {
  while (!stop_) {
    pollfd p{ec_->fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    rdma_cm_event* ev = nullptr;
    if (V().rdma_get_cm_event(ec_, &ev) != 0) continue;
    rdma_cm_id* id = ev->id;
    rdma_cm_event_type type = ev->event;
    V().rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
      ibv_cq* cq = V().ibv_create_cq(id->verbs, kMaxWr, nullptr, nullptr, 0);
      ibv_qp_init_attr qa = QpAttr(cq);
      rdma_conn_param cp{};
      cp.responder_resources = kDepth;
      cp.initiator_depth = kDepth;
      cp.rnr_retry_count = 7;
      if (!cq || id->verbs != pd_->context || V().rdma_create_qp(id, pd_, &qa) != 0 ||
          V().rdma_accept(id, &cp) != 0) {
        spdlog::warn("RDMA: refusing a connection: {}", std::strerror(errno));
        V().rdma_reject(id, nullptr, 0);
        if (id->qp) V().rdma_destroy_qp(id);
        if (cq) V().ibv_destroy_cq(cq);
        V().rdma_destroy_id(id);
        continue;
      }
      peers_.push_back({id, cq});
    } else if (type == RDMA_CM_EVENT_DISCONNECTED) {
      for (auto it = peers_.begin(); it != peers_.end(); ++it) {
        if (it->id != id) continue;
        V().rdma_destroy_qp(id);
        V().ibv_destroy_cq(it->cq);
        V().rdma_destroy_id(id);
        peers_.erase(it);
        break;
      }
    }
  }
}

RdmaListener::~RdmaListener() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (Peer& p : peers_) {
    V().rdma_disconnect(p.id);
    V().rdma_destroy_qp(p.id);
    V().ibv_destroy_cq(p.cq);
    V().rdma_destroy_id(p.id);
  }
  if (pool_mr_) V().ibv_dereg_mr(pool_mr_);
  DeregisterDevice();
  if (pd_) V().ibv_dealloc_pd(pd_);
  if (listen_id_) V().rdma_destroy_id(listen_id_);
  if (ec_) V().rdma_destroy_event_channel(ec_);
}

Result<std::unique_ptr<RdmaConnection>> RdmaConnection::Connect(
    const HostPort& to, size_t bounce_bytes, std::chrono::milliseconds timeout,
    std::shared_ptr<ReadCounters> counters) {
  auto sa = Addr(to);
  if (!sa.ok()) return sa.status();
  EC_RETURN_IF_ERROR(Loaded());
  std::unique_ptr<RdmaConnection> c(new RdmaConnection());
  c->timeout_ = timeout;
  c->counters_ = counters ? std::move(counters) : std::make_shared<ReadCounters>();
  c->ec_ = V().rdma_create_event_channel();
  if (!c->ec_) return Status::Unavailable("rdma_create_event_channel failed: no RDMA support");
  if (V().rdma_create_id(c->ec_, &c->id_, nullptr, RDMA_PS_TCP) != 0)
    return Status::FromErrno(errno, "rdma_create_id");
  int ms = static_cast<int>(timeout.count());
  if (V().rdma_resolve_addr(c->id_, nullptr, reinterpret_cast<sockaddr*>(&*sa), ms) != 0)
    return Status::Unavailable("rdma_resolve_addr " + to.host + ": " + std::strerror(errno));
  EC_RETURN_IF_ERROR(WaitEvent(c->ec_, RDMA_CM_EVENT_ADDR_RESOLVED, timeout, "address resolution"));
  if (V().rdma_resolve_route(c->id_, ms) != 0)
    return Status::FromErrno(errno, "rdma_resolve_route");
  EC_RETURN_IF_ERROR(WaitEvent(c->ec_, RDMA_CM_EVENT_ROUTE_RESOLVED, timeout, "route resolution"));
  c->pd_ = V().ibv_alloc_pd(c->id_->verbs);
  c->cq_ = c->pd_ ? V().ibv_create_cq(c->id_->verbs, kMaxWr, nullptr, nullptr, 0) : nullptr;
  if (!c->cq_) return Status::Unavailable("cannot allocate RDMA protection domain / CQ");
  ibv_qp_init_attr qa = QpAttr(c->cq_);
  if (V().rdma_create_qp(c->id_, c->pd_, &qa) != 0)
    return Status::FromErrno(errno, "rdma_create_qp");
  c->bounce_bytes_ = (bounce_bytes + 4095) / 4096 * 4096;
  c->bounce_ = static_cast<uint8_t*>(std::aligned_alloc(4096, c->bounce_bytes_));
  if (!c->bounce_) return Status::NoSpace("no memory for the RDMA bounce buffer");
  c->mr_ = (V().ibv_reg_mr)(c->pd_, c->bounce_, c->bounce_bytes_, IBV_ACCESS_LOCAL_WRITE);
  if (!c->mr_) return Status::FromErrno(errno, "registering the RDMA bounce buffer");
  rdma_conn_param cp{};
  cp.responder_resources = kDepth;
  cp.initiator_depth = kDepth;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  if (V().rdma_connect(c->id_, &cp) != 0) return Status::FromErrno(errno, "rdma_connect");
  EC_RETURN_IF_ERROR(WaitEvent(c->ec_, RDMA_CM_EVENT_ESTABLISHED, timeout, "connection"));
  return c;
}

RdmaConnection::~RdmaConnection() {
  for (ibv_mr* mr : user_mrs_) V().ibv_dereg_mr(mr);
  if (id_ && id_->qp) {
    V().rdma_disconnect(id_);
    V().rdma_destroy_qp(id_);
  }
  if (mr_) V().ibv_dereg_mr(mr_);
  std::free(bounce_);
  if (cq_) V().ibv_destroy_cq(cq_);
  if (pd_) V().ibv_dealloc_pd(pd_);
  if (id_) V().rdma_destroy_id(id_);
  if (ec_) V().rdma_destroy_event_channel(ec_);
}

Status RdmaConnection::RegisterBuffer(std::span<uint8_t> m, bool device, int dmabuf_fd) {
  if (RegisteredFor(m.data(), m.size())) return Status::Ok();
  ibv_mr* mr = nullptr;
  std::string why;
  if (device && dmabuf_fd >= 0 && V().ibv_reg_dmabuf_mr) {
    mr = V().ibv_reg_dmabuf_mr(pd_, 0, m.size(), reinterpret_cast<uint64_t>(m.data()), dmabuf_fd,
                               IBV_ACCESS_LOCAL_WRITE);
    if (!mr) why = std::string("ibv_reg_dmabuf_mr: ") + std::strerror(errno) + "; ";
  }
  if (!mr) mr = (V().ibv_reg_mr)(pd_, m.data(), m.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!mr && device)
    return Status::Unavailable("the NIC cannot register this GPU memory (" + why +
                               "ibv_reg_mr of device memory: " + std::strerror(errno) +
                               "; it needs dma-buf support or nvidia-peermem): gets into it "
                               "are staged through host memory");
  if (!mr) return Status::FromErrno(errno, "registering a destination buffer (ibv_reg_mr)");
  user_mrs_.push_back(mr);
  return Status::Ok();
}

void RdmaConnection::UnregisterBuffer(std::span<uint8_t> m) {
  for (auto it = user_mrs_.begin(); it != user_mrs_.end(); ++it)
    if ((*it)->addr == m.data() && (*it)->length == m.size()) {
      V().ibv_dereg_mr(*it);
      user_mrs_.erase(it);
      return;
    }
}

ibv_mr* RdmaConnection::RegisteredFor(const uint8_t* p, uint64_t len) const {
  for (ibv_mr* mr : user_mrs_) {
    auto* base = static_cast<const uint8_t*>(mr->addr);
    if (p >= base && p + len <= base + mr->length) return mr;
  }
  return nullptr;
}

std::vector<RdmaConnection::ReadPiece> RdmaConnection::NextGroup(
    const std::vector<RemoteRead>& reads, size_t* next, uint64_t* carried) const {
  std::vector<ReadPiece> pieces;
  uint64_t used = 0;  // of the bounce buffer
  size_t& i = *next;
  while (i < reads.size() && pieces.size() < static_cast<size_t>(kDepth)) {
    const RemoteRead& r = reads[i];
    if (r.length == 0) {  // nothing to read (an empty tensor)
      ++i;
      continue;
    }
    if (ibv_mr* mr = *carried == 0 ? RegisteredFor(r.dst, r.length) : nullptr) {
      pieces.push_back({i, 0, r.length, 0, mr});  // straight into the caller's memory
      ++i;
      continue;
    }
    uint64_t take = std::min<uint64_t>(r.length - *carried, bounce_bytes_ - used);
    if (take == 0) break;
    pieces.push_back({i, *carried, take, used, nullptr});
    used += take;
    *carried += take;
    if (*carried == r.length) {
      *carried = 0;
      ++i;
    }
    if (used == bounce_bytes_) break;
  }
  return pieces;
}

Status RdmaConnection::PostAndWait(const std::vector<RemoteRead>& reads,
                                   const std::vector<ReadPiece>& pieces) {
  std::vector<ibv_sge> sges(pieces.size());
  std::vector<ibv_send_wr> wrs(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    const ReadPiece& p = pieces[k];
    sges[k] = p.direct ? ibv_sge{reinterpret_cast<uint64_t>(reads[p.read].dst),
                                 static_cast<uint32_t>(p.len), p.direct->lkey}
                       : ibv_sge{reinterpret_cast<uint64_t>(bounce_ + p.bounce_off),
                                 static_cast<uint32_t>(p.len), mr_->lkey};
    ibv_send_wr& wr = wrs[k];
    wr = {};
    wr.wr_id = k;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sges[k];
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reads[p.read].remote_addr + p.off_in_read;
    wr.wr.rdma.rkey = reads[p.read].rkey;
    wr.next = k + 1 < pieces.size() ? &wrs[k + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(id_->qp, &wrs[0], &bad) != 0)
    return Status::Unavailable(std::string("ibv_post_send: ") + std::strerror(errno));
  size_t done = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  ibv_wc wc[16];
  while (done < pieces.size()) {
    int n = ibv_poll_cq(cq_, 16, wc);
    if (n < 0) return Status::Unavailable("ibv_poll_cq failed");
    for (int k = 0; k < n; ++k)
      if (wc[k].status != IBV_WC_SUCCESS)
        return Status::Unavailable(std::string("RDMA READ failed: ") +
                                   V().ibv_wc_status_str(wc[k].status));
    done += static_cast<size_t>(n);
    if (n == 0) {
      if (std::chrono::steady_clock::now() > deadline)
        return Status::Unavailable("RDMA READ did not complete in time");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  return Status::Ok();
}

Status RdmaConnection::ReadMany(const std::vector<RemoteRead>& reads) {
  size_t next = 0;
  uint64_t carried = 0;  // progress inside a read larger than the bounce buffer
  for (;;) {
    std::vector<ReadPiece> pieces = NextGroup(reads, &next, &carried);
    if (pieces.empty()) return Status::Ok();
    if (Status st = PostAndWait(reads, pieces); !st.ok()) return st;
    for (const ReadPiece& p : pieces) {
      if (p.direct) {
        counters_->direct_reads.fetch_add(1, std::memory_order_relaxed);
        counters_->direct_bytes.fetch_add(p.len, std::memory_order_relaxed);
        continue;
      }
      std::memcpy(reads[p.read].dst + p.off_in_read, bounce_ + p.bounce_off, p.len);
      if (p.off_in_read == 0) counters_->bounced_reads.fetch_add(1, std::memory_order_relaxed);
      counters_->bounced_bytes.fetch_add(p.len, std::memory_order_relaxed);
    }
  }
}

}  // namespace ecstore::rdma
