// TCP: the bytes of a get follow its reply on the control connection, read straight into
// the caller's buffer (the server sends them with one sendmsg from its pinned pool).
#include "net/transport.h"

namespace ecstore::net {

std::string KeyBody(std::string_view ns, std::string_view key) {
  BodyWriter w;
  w.Str(ns);
  w.Str(key);
  return w.data();
}

Status BufferTooSmall(uint64_t have, const EntryInfo& entry) {
  return Status::BufferTooSmall("destination buffer holds " + std::to_string(have) +
                                    " bytes but the entry has " + std::to_string(entry.bytes),
                                entry.bytes, entry.meta);
}

std::vector<Result<EntryInfo>> Transport::GetMany(Channel&, std::string_view,
                                                  const std::vector<std::string>& keys,
                                                  const std::vector<std::span<uint8_t>>&) {
  return std::vector<Result<EntryInfo>>(
      keys.size(), Status::InvalidArgument(std::string("the ") + name() +
                                           " transport reads in place: the Client copies a "
                                           "get out of its leases"));
}
Result<ReadLease> Transport::AcquireInPlace(Channel&, std::string_view, std::string_view) {
  return Status::InvalidArgument(std::string("the ") + name() +
                                 " transport cannot read the server's memory in place");
}
Result<std::vector<Result<ReadLease>>> Transport::AcquireManyInPlace(
    Channel& ch, std::string_view ns, const std::vector<std::string>& keys) {
  EC_RETURN_IF_ERROR(SendLeaseBatch(ch, ns, keys));
  return ReadLeaseBatch(ch, ns, keys);
}
Status Transport::SendLeaseBatch(Channel&, std::string_view, const std::vector<std::string>&) {
  return Status::InvalidArgument(std::string("the ") + name() +
                                 " transport cannot read the server's memory in place");
}
Result<std::vector<Result<ReadLease>>> Transport::ReadLeaseBatch(Channel&, std::string_view,
                                                                 const std::vector<std::string>&) {
  return Status::InvalidArgument(std::string("the ") + name() +
                                 " transport cannot read the server's memory in place");
}
Result<std::vector<Result<ReadLease>>> Transport::AcquireManyStreamed(
    Channel&, std::string_view, const std::vector<std::string>&, Cache::LandingWatch*) {
  return Status::InvalidArgument(std::string("the ") + name() +
                                 " transport cannot stream leased reads");
}
Result<ReadLease> Transport::AcquireOnDevice(Channel&, std::string_view, std::string_view) {
  return Status::InvalidArgument(std::string("the ") + name() +
                                 " transport cannot read the server's device pool: that needs "
                                 "the same host (connect through the unix socket)");
}
Status Transport::RegisterMemory(const BufferDesc&) { return Status::Ok(); }
void Transport::UnregisterMemory(const BufferDesc&) {}

namespace {

class TcpTransport : public Transport {
 public:
  const char* name() const override { return "tcp"; }
  TransportCaps caps() const override { return {}; }

  // Pipelined: every request is sent, then the replies are read in order.
  std::vector<Result<EntryInfo>> GetMany(Channel& ch, std::string_view ns,
                                         const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override {
    std::vector<Result<EntryInfo>> out;
    Status st;
    for (size_t i = 0; i < keys.size() && st.ok(); ++i) {
      Status v = ValidateKey(keys[i]);
      st = ch.SendRequest(Op::kGet, KeyBody(ns, v.ok() ? keys[i] : "?"));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!st.ok()) {
        out.push_back(st);
        continue;
      }
      EntryInfo info;
      std::span<uint8_t> dst = dsts[i];
      Status r = ch.ReadGetReply([dst](const EntryInfo&) { return dst; }, &info);
      if (r.IsUnavailable()) st = r;  // the stream is gone: every later reply fails too
      if (!r.ok()) {
        out.push_back(r);
        continue;
      }
      info.ns = ns;
      info.key = keys[i];
      out.push_back(info);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Transport> NewTcpTransport() { return std::make_unique<TcpTransport>(); }

}  // namespace ecstore::net
