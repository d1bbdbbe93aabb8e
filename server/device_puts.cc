#include "server/device_puts.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "base/mutex.h"

namespace ecstore::net {

DevicePuts::~DevicePuts() {
  if (registrar_) store_->RemoveRegistrar(registrar_.get());
}

bool DevicePuts::Offered() {
  MutexLock l(&mu_);
  if (offered_ < 0) offered_ = cuda::DeviceCount() > 0 ? 1 : 0;
  return offered_ == 1;
}

Status DevicePuts::Prepare() {
  MutexLock l(&mu_);
  if (prepared_) return prepare_error_;
  prepared_ = true;
  if (store_->device_region().base) return prepare_error_;  // the device tier registered it
  registrar_ = cuda::NewHostRegistrar();
  if (!registrar_) {
    prepare_error_ = Status::InvalidArgument("this server was built without CUDA");
    return prepare_error_;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status st = store_->AddRegistrar(registrar_.get());
  if (!st.ok()) {
    registrar_.reset();
    prepare_error_ = Status::InvalidArgument(
        "device puts need the server's pool registered with CUDA, which failed (" + st.ToString() +
        "); put through the put arena instead");
    spdlog::warn("{}", prepare_error_.message());
    return prepare_error_;
  }
  spdlog::info(
      "pool registered with CUDA for device puts in {:.0f} ms",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return Status::Ok();
}

DeviceImports::~DeviceImports() {
  for (const Import& i : open_) cuda::CloseIpcHandle(i.base);
}

void DeviceImports::CloseIdle(std::chrono::steady_clock::time_point now) {
  auto idle = [&](const Import& i) { return now - i.used >= kIdleClose; };
  for (const Import& i : open_)
    if (idle(i)) cuda::CloseIpcHandle(i.base);
  std::erase_if(open_, idle);
}

Result<const uint8_t*> DeviceImports::Open(const std::string& handle, uint64_t buffer_id,
                                           int device, uint64_t offset, uint64_t size) {
  const auto now = std::chrono::steady_clock::now();
  auto it =
      std::find_if(open_.begin(), open_.end(), [&](const Import& i) { return i.handle == handle; });
  if (it != open_.end() && it->buffer_id != buffer_id) {  // freed and allocated again
    cuda::CloseIpcHandle(it->base);
    open_.erase(it);
    it = open_.end();
  }
  if (it == open_.end()) {
    if (open_.size() >= kMaxImports) {
      cuda::CloseIpcHandle(open_.front().base);
      open_.erase(open_.begin());
    }
    auto base = cuda::OpenIpcHandle(handle, device);
    if (!base.ok())
      return Status::InvalidArgument("the client's device memory cannot be opened here (" +
                                     base.status().message() + "); put through the put arena");
    auto a = cuda::AllocationOf(*base);
    if (!a.ok()) {
      cuda::CloseIpcHandle(*base);
      return a.status().WithContext("sizing the client's device allocation");
    }
    open_.push_back({handle, buffer_id, static_cast<uint8_t*>(*base), a->bytes, now});
    it = open_.end() - 1;
  } else {
    std::rotate(it, it + 1, open_.end());  // the most recently used last
    it = open_.end() - 1;
    it->used = now;
  }
  if (offset > it->bytes || size > it->bytes - offset)
    return Status::InvalidArgument("PUT_DEVICE of [" + std::to_string(offset) + ", +" +
                                   std::to_string(size) + ") lies outside the client's " +
                                   std::to_string(it->bytes) + "-byte device allocation");
  return it->base + offset;
}

bool DeviceImports::WouldEvict(const std::string& handle, uint64_t buffer_id) const {
  for (const Import& i : open_)
    if (i.handle == handle && i.buffer_id == buffer_id) return false;
  return open_.size() >= kMaxImports;
}

Result<cuda::CopyStream*> DeviceImports::Stream(int device) {
  if (!stream_ || stream_->device() != device) {
    auto s = cuda::CopyStream::Create(device);
    if (!s.ok()) return s.status();
    stream_ = std::move(s).value();
  }
  return stream_.get();
}

Result<int> DeviceImports::Device(const std::string& bus_id) {
  if (bus_id != bus_id_ || device_ < 0) {
    auto d = cuda::DeviceByBusId(bus_id);
    if (!d.ok())
      return Status::InvalidArgument(d.status().message() + "; put through the put arena");
    bus_id_ = bus_id;
    device_ = *d;
  }
  return device_;
}

namespace {
Status PutFromClientDevice(DevicePuts* puts, DeviceImports* imports, const KeyRef& k,
                           const TensorMeta& meta, const std::string& bus_id,
                           const std::string& handle, uint64_t buffer_id, uint64_t offset,
                           uint64_t size, uint8_t flags) {
  auto device = imports->Device(bus_id);
  if (!device.ok()) return device.status();
  auto src = imports->Open(handle, buffer_id, *device, offset, size);
  if (!src.ok()) return src.status();
  Store* store = puts->store();
  if (store->device_region().base && store->device_ordinal() == *device)  // device->device
    return store->PutFromDevice(k.ns, k.key, meta, *src, size);
  EC_RETURN_IF_ERROR(puts->Prepare());
  auto stream = imports->Stream(*device);
  if (!stream.ok()) return stream.status();
  auto res = store->Reserve(k.ns, k.key, meta, size);
  if (!res.ok()) return res.status();
  // Dropped uncommitted on an error: nothing stored.
  EC_RETURN_IF_ERROR((*stream)
                         ->Copy(res->bytes().data(), *src, size, cuda::Direction::kDeviceToHost)
                         .WithContext("copying the client's device memory into the pool"));
  if (flags & kPutChecksumWhenSpilled) res->ChecksumWhenSpilled();
  return store->Commit(std::move(res).value());
}

// A step's items: each reserved and its copy enqueued on the connection's stream, then one
// wait and the commits. An item that fails is answered alone; a reservation whose copy
// failed is dropped uncommitted. Items for the device tier's own GPU go device->device.
class BatchPut {
 public:
  BatchPut(DevicePuts* puts, DeviceImports* imports, const DevicePutBatch& b)
      : puts_(puts), imports_(imports), b_(b), out_(b.items.size(), Status::Ok()) {}

  std::vector<Status> Run() {
    for (size_t i = 0; i < b_.items.size(); ++i) out_[i] = Enqueue(i);
    Finish();
    return std::move(out_);
  }

 private:
  Status Enqueue(size_t i) {
    const DevicePutItem& it = b_.items[i];
    auto device = imports_->Device(it.bus_id);
    if (!device.ok()) return device.status();
    if (imports_->WouldEvict(it.handle, it.buffer_id)) Finish();  // its source may be closed
    auto src = imports_->Open(it.handle, it.buffer_id, *device, it.offset, it.size);
    if (!src.ok()) return src.status();
    Store* store = puts_->store();
    if (store->device_region().base && store->device_ordinal() == *device)
      return store->PutFromDevice(b_.ns, it.key, it.meta, *src, it.size);
    EC_RETURN_IF_ERROR(puts_->Prepare());
    // The connection's one stream follows the device: another GPU's item waits for the last.
    if (!pending_.empty() && pending_.front().device != *device) Finish();
    auto stream = imports_->Stream(*device);
    if (!stream.ok()) return stream.status();
    // Blocks held uncommitted cannot be evicted: past a quarter of the pool, or where no
    // block is to be had, the copies so far are committed first.
    if (pending_bytes_ + it.size > store->pool_region().size / 4) Finish();
    auto res = store->Reserve(b_.ns, it.key, it.meta, it.size);
    if (!res.ok() && !pending_.empty()) {
      Finish();
      res = store->Reserve(b_.ns, it.key, it.meta, it.size);
    }
    if (!res.ok()) return res.status();
    EC_RETURN_IF_ERROR(cuda::EnqueueCopy(res->bytes().data(), *src, it.size,
                                         cuda::Direction::kDeviceToHost, *device,
                                         (*stream)->handle())
                           .WithContext("copying the client's device memory into the pool"));
    if (b_.flags & kPutChecksumWhenSpilled) res->ChecksumWhenSpilled();
    pending_bytes_ += it.size;
    pending_.push_back({i, *device, (*stream)->handle(), std::move(res).value()});
    return Status::Ok();
  }

  // Waits for the enqueued copies, then commits them.
  void Finish() {
    if (pending_.empty()) return;
    const Status waited = cuda::WaitForStream(pending_.front().device, pending_.front().stream);
    for (Pending& p : pending_)
      out_[p.item] = waited.ok() ? puts_->store()->Commit(std::move(p.res))
                                 : waited.WithContext("copying the client's device memory");
    pending_.clear();
    pending_bytes_ = 0;
  }

  struct Pending {
    size_t item;
    int device;
    uintptr_t stream;
    PutReservation res;
  };
  DevicePuts* const puts_;
  DeviceImports* const imports_;
  const DevicePutBatch& b_;
  std::vector<Status> out_;
  std::vector<Pending> pending_;
  uint64_t pending_bytes_ = 0;
};
}  // namespace

Result<Answer> AnswerDevicePut(DevicePuts* puts, std::unique_ptr<DeviceImports>* imports, Op op,
                               BodyReader* r, std::string* ns, std::string* key,
                               uint64_t* bytes_in) {
  if (!puts->Offered())
    return Answer{Status::InvalidArgument("this server sees no GPU: device puts are not offered; "
                                          "put through the put arena"),
                  Op::kError,
                  {}};
  if (op == Op::kPrepareDevicePuts) return Answer{puts->Prepare(), Op::kOk, {}};
  if (!*imports) *imports = std::make_unique<DeviceImports>();
  if (op == Op::kPutDeviceMany) {
    auto b = ParsePutDeviceManyBody(r);
    if (!b.ok()) return b.status();
    *ns = b->ns;
    *key = b->items[0].key;
    *bytes_in = 0;
    for (const DevicePutItem& i : b->items) *bytes_in += i.size;
    return Answer{Status::Ok(), Op::kPutDeviceManyOk,
                  PutDeviceManyReplyBody(BatchPut(puts, imports->get(), *b).Run())};
  }
  auto k = ParseKeyBody(r);
  if (!k.ok()) return k.status();
  TensorMeta meta;
  std::string bus_id, handle;
  uint64_t buffer_id, offset, size;
  uint8_t flags;
  if (!r->Meta(&meta) || !r->Str(&bus_id, 64) || !r->Str(&handle, 256) || !r->U64(&buffer_id) ||
      !r->U64(&offset) || !r->U64(&size) || !r->U8(&flags) || (flags & ~kPutChecksumWhenSpilled))
    return Status::InvalidArgument("malformed PUT_DEVICE");
  *ns = k->ns;
  *key = k->key;
  *bytes_in = size;
  return Answer{PutFromClientDevice(puts, imports->get(), *k, meta, bus_id, handle, buffer_id,
                                    offset, size, flags),
                Op::kOk,
                {}};
}

}  // namespace ecstore::net
