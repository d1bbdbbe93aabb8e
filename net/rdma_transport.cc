// RDMA verbs: GET_RDMA answers (lease, remote address, rkey, info) on the control
// connection; the NIC reads the bytes from the server's registered pool, straight into the
// caller's buffer when the caller registered it (RegisterMemory), else through the bounce
// buffer registered once per connection; then the leases are released.
#include <unistd.h>

#include "cuda/cuda.h"
#include "net/socket.h"
#include "net/transport.h"
#include "rdma/verbs.h"

namespace ecstore::net {
namespace {

class RdmaTransport : public Transport {
 public:
  explicit RdmaTransport(std::unique_ptr<rdma::RdmaConnection> c) : conn_(std::move(c)) {}
  const char* name() const override { return "rdma"; }
  TransportCaps caps() const override { return {.one_sided_read = true}; }
  Status RegisterMemory(const BufferDesc& m) override {
    if (!m.on_device()) return conn_->RegisterBuffer(m.span());
    auto fd = cuda::DmaBufFd(m.data, m.size);  // a dma-buf of the GPU memory, where CUDA gives one
    Status st = conn_->RegisterBuffer(m.span(), true, fd.ok() ? *fd : -1);
    if (fd.ok()) ::close(*fd);  // the memory region holds its own reference
    return st;
  }
  void UnregisterMemory(const BufferDesc& m) override { conn_->UnregisterBuffer(m.span()); }

  // Leases for the whole batch are asked for together (pipelined), then every RDMA READ of
  // the batch is posted together, then the leases are released.
  std::vector<Result<EntryInfo>> GetMany(Channel& ch, std::string_view ns,
                                         const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override {
    std::vector<Result<EntryInfo>> out(keys.size(), Status::Unavailable("not attempted"));
    std::vector<bool> answered(keys.size(), false);  // out[i] is key i's own answer
    Status st;
    for (size_t i = 0; i < keys.size() && st.ok(); ++i)
      st = ch.SendRequest(Op::kGetRdma, KeyBody(ns, keys[i]));
    std::vector<rdma::RemoteRead> reads;
    std::vector<size_t> read_of;
    std::vector<uint64_t> leases;
    for (size_t i = 0; i < keys.size() && st.ok(); ++i) {
      auto body = ch.ReadReply(Op::kGetRdmaOk);
      if (!body.ok()) {
        if (body.status().IsUnavailable()) st = body.status();
        out[i] = body.status();
        answered[i] = true;
        continue;
      }
      BodyReader r(reinterpret_cast<const uint8_t*>(body->data()), body->size());
      uint64_t lease, addr;
      uint32_t rkey;
      EntryInfo info;
      if (!r.U64(&lease) || !r.U64(&addr) || !r.U32(&rkey) || !ReadInfo(&r, &info)) {
        st = Status::Unavailable("malformed GET_RDMA reply");
        break;
      }
      leases.push_back(lease);
      info.ns = ns;
      info.key = keys[i];
      if (dsts[i].size() < info.bytes) {
        out[i] = BufferTooSmall(dsts[i].size(), info);
        answered[i] = true;
        continue;
      }
      reads.push_back({addr, rkey, info.bytes, dsts[i].data()});
      read_of.push_back(i);
      out[i] = info;
      answered[i] = true;
    }
    if (st.ok() && !reads.empty()) st = conn_->ReadMany(reads);
    if (!st.ok()) {  // the connection is broken: the Client rebuilds it
      for (size_t i : read_of) out[i] = st;
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i].ok() || !answered[i]) out[i] = st;
      return out;
    }
    for (uint64_t lease : leases) ch.lease_releaser()->Release(reinterpret_cast<void*>(lease));
    return out;
  }

 private:
  std::unique_ptr<rdma::RdmaConnection> conn_;
};

}  // namespace

Result<std::unique_ptr<Transport>> NewRdmaTransport(const std::string& rdma_addr,
                                                    size_t bounce_bytes,
                                                    std::chrono::milliseconds timeout,
                                                    std::shared_ptr<rdma::ReadCounters> counters) {
  auto hp = ParseHostPort(rdma_addr);
  if (!hp.ok()) return hp.status();
  auto c = rdma::RdmaConnection::Connect(*hp, bounce_bytes, timeout, std::move(counters));
  if (!c.ok()) return c.status();
  return std::unique_ptr<Transport>(std::make_unique<RdmaTransport>(std::move(c).value()));
}

}  // namespace ecstore::net
