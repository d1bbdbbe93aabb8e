#include "cluster/node_link.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "base/mutex.h"
#include "cluster/consistency.h"
#include "net/client.h"

namespace ecstore::cluster {

int64_t NodeLink::NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

bool SameHost(const NodeInfo& n) {
  static const std::string self = HostName();
  return !n.unix_path.empty() && !self.empty() && n.host == self &&
         access(n.unix_path.c_str(), W_OK) == 0;
}

}  // namespace

// Releases a node's lease over that node's connection, under its mutex, from any thread.
class NodeLink::Leases : public ReadLease::Releaser {
 public:
  struct Held {
    std::shared_ptr<NodeLink> node;
    ReadLease inner;
  };
  void Release(void* token) override {
    auto* h = static_cast<Held*>(token);
    std::shared_ptr<NodeLink> node = h->node;
    MutexLock l(&node->mu_);
    delete h;
    node->last_use_us_.store(NowUs());
    --node->leases_;
  }
};

namespace {
std::atomic<uint64_t> g_unproven{0};

// Over TLS the node proves the id its record claims by its certificate's member URI, and by
// nothing else: a record may claim any address, so an address proves nothing.
net::ClientOptions ProvingItsName(net::ClientOptions o, const std::string& cluster,
                                  const NodeInfo& info) {
  if (o.tls) {
    o.tls->server_name.clear();
    o.tls->server_uri = MemberUri(cluster, info.id);
  }
  return o;
}
}  // namespace

uint64_t NodeLink::unproven() { return g_unproven.load(); }

NodeLink::NodeLink(NodeInfo info, std::string cluster, net::ClientOptions options,
                   std::chrono::milliseconds down_for, Connector connector,
                   std::chrono::milliseconds idle_close)
    : info_(std::move(info)),
      cluster_(std::move(cluster)),
      options_(ProvingItsName(std::move(options), cluster_, info_)),
      down_for_(down_for),
      connector_(std::move(connector)),
      idle_close_(idle_close) {}

NodeLink::~NodeLink() = default;

void NodeLink::MarkDown(const Status& why) {
  down_until_us_ = NowUs() + std::chrono::microseconds(down_for_).count();
  if (!down_.exchange(true))
    spdlog::warn(
        "cluster {}: node {} at {} does not answer ({}); its keys are misses until it "
        "does or leaves",
        cluster_, info_.id, info_.tcp, why.message());
}

void NodeLink::Observe(const Status& st) {
  last_use_us_.store(NowUs());
  if (st.IsUnavailable() && st.message().find(kViewBehind) == std::string::npos)
    MarkDown(st);
  else if (down_.exchange(false))
    spdlog::info("cluster {}: node {} answers again", cluster_, info_.id);
}

Status NodeLink::NotDown() const {
  if (down_until_us_.load() > NowUs())
    return Status::Unavailable("cluster node " + info_.id + " at " + info_.tcp +
                               " did not answer a moment ago");
  return Status::Ok();
}

Status NodeLink::Connected(int64_t view) {
  if (!client_) {
    auto c = Connect();
    if (!c.ok()) return c.status();
    client_ = std::move(c).value();
    declared_ = 0;
    RegisterAll();
  }
  if (view != 0 && view != declared_) {
    // The client sends it again after each reconnect; a failed send is the call's to find.
    if (auto* nc = dynamic_cast<net::Client*>(client_.get())) (void)nc->SetView(view);
    declared_ = view;
  }
  return Status::Ok();
}

void NodeLink::RegisterAll() {
  MemoryRegistration* memory = client_->capabilities().memory;
  for (const BufferDesc& m : registered_)  // best effort: unregistered memory is bounced
    if (Status st = memory ? memory->RegisterMemory(m) : Status::Ok(); !st.ok())
      spdlog::warn("cluster {}: node {}: {}", cluster_, info_.id, st.ToString());
}

Result<std::unique_ptr<Cache>> NodeLink::Connect() {
  if (connector_) {
    auto c = connector_(info_);
    if (!c.ok()) MarkDown(c.status());
    return c;
  }
  // A node on this host is read through its shared memory (its unix socket), else over TCP.
  // A node that let its socket's deadline pass is hung, not elsewhere: TCP is not tried
  // too, so that a call costs one deadline.
  Result<std::unique_ptr<net::Client>> c = Status::Unavailable("not connected");
  const auto t0 = std::chrono::steady_clock::now();
  // Over TLS never a record's unix socket: nothing there proves the node.
  auto use = net::ChooseTransport(
      {.same_host = SameHost(info_), .shm = !info_.unix_path.empty() && !options_.tls},
      options_.transport);
  if (use.ok() && *use == net::TransportKind::kShm)
    c = net::Client::Connect("unix:" + info_.unix_path, options_);
  const bool hung = !c.ok() && std::chrono::steady_clock::now() - t0 >= options_.timeout / 2;
  if (!c.ok() && !hung)
    c = net::Client::Connect((options_.tls ? "tls://" : "tcp://") + info_.tcp, options_);
  if (!c.ok() && c.status().IsPermissionDenied() && options_.tls &&
      c.status().message().find("certificate") != std::string::npos) {
    ++g_unproven;
    MarkDown(Status::PermissionDenied("it cannot prove it is node " + info_.id + ": " +
                                      c.status().message()));
    return Status::Unavailable("cluster node " + info_.id + " at " + info_.tcp +
                               " did not prove its name; nothing was sent to it");
  }
  if (!c.ok()) {
    MarkDown(c.status());
    return Status::Unavailable("cluster node " + info_.id + ": " + c.status().message());
  }
  return std::unique_ptr<Cache>(std::move(c).value());
}

Result<ReadLease> NodeLink::Wrap(Result<ReadLease> got) {
  static Leases leases;  // stateless: every lease says its node
  if (!got.ok()) return got;
  ReadLease inner = std::move(got).value();
  if (!inner.data() && inner.size() == 0) return inner;
  const uint8_t* data = inner.data();
  EntryInfo info = inner.info();
  const MemoryKind kind = inner.memory_kind();
  const Tier from = inner.served_from();
  ++leases_;  // the call that read it ended moments ago: no idle close in between
  auto* held = new Leases::Held{shared_from_this(), std::move(inner)};
  return ReadLease(&leases, held, data, std::move(info), kind, from);
}

void NodeLink::IfConnected(const std::function<void(Cache&)>& fn) {
  MutexLock l(&mu_);
  if (client_) fn(*client_);
}

bool NodeLink::CloseIfIdle() {
  if (idle_close_.count() <= 0 || leases_.load() > 0) return false;
  if (!mu_.TryLock()) return false;  // a call in progress: not idle
  const bool closed = CloseIdle();
  mu_.unlock();
  return closed;
}

bool NodeLink::CloseIdle() {
  if (!client_ || leases_.load() > 0) return false;
  if (NowUs() - last_use_us_.load() < std::chrono::microseconds(idle_close_).count()) return false;
  client_.reset();
  return true;
}

bool NodeLink::connected() {
  MutexLock l(&mu_);
  return client_ != nullptr;
}

Status NodeLink::Register(const BufferDesc& memory) {
  MutexLock l(&mu_);
  registered_.push_back(memory);
  MemoryRegistration* m = client_ ? client_->capabilities().memory : nullptr;
  Status st = m ? m->RegisterMemory(memory) : Status::Ok();
  if (!st.ok()) registered_.pop_back();
  return st;
}

void NodeLink::Unregister(const BufferDesc& memory) {
  MutexLock l(&mu_);
  auto it = std::find_if(registered_.begin(), registered_.end(), [&](const BufferDesc& r) {
    return r.data == memory.data && r.size == memory.size;
  });
  if (it == registered_.end()) return;
  registered_.erase(it);
  const bool still = std::any_of(registered_.begin(), registered_.end(), [&](const BufferDesc& r) {
    return r.data == memory.data && r.size == memory.size;
  });
  if (MemoryRegistration* m = client_ ? client_->capabilities().memory : nullptr; m && !still)
    m->UnregisterMemory(memory);
}

std::string NodeLink::transport() {
  std::string t;
  IfConnected([&](Cache& c) { t = c.transport(); });
  return t;
}

}  // namespace ecstore::cluster
