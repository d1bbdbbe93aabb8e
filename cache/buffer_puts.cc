// PutManyFromBuffers (cache/buffer_io.h): a step's saves together.
#include <map>
#include <memory>
#include <utility>

#include "cache/buffer_io.h"
#include "cuda/cuda.h"

namespace ecstore {
namespace {

// The items' streams, each waited for once; an item whose stream failed is answered so and
// left out of `idx`.
void WaitForStreams(const std::vector<BufferPut>& items, std::vector<size_t>* idx,
                    std::vector<Status>* out) {
  std::map<std::pair<int, uintptr_t>, std::vector<size_t>> by;
  for (size_t i : *idx) by[{items[i].src.device, items[i].src.stream}].push_back(i);
  std::vector<size_t> ok;
  for (const auto& [where, is] : by) {
    Status st = cuda::WaitForStream(where.first, where.second);
    for (size_t i : is)
      if (st.ok())
        ok.push_back(i);
      else
        (*out)[i] = st.WithContext("copying the entry out of device memory");
  }
  *idx = std::move(ok);
}

// Reserved blocks held uncommitted cannot be evicted: past this many bytes of them the
// copies so far are waited for and committed before more are reserved.
constexpr uint64_t kMaxPendingSlotBytes = 256ull << 20;

// Blocks filled by copies enqueued but not yet waited for, then committed together.
class SlotBatch {
 public:
  SlotBatch(const std::vector<BufferPut>& items, bool checksum_when_spilled,
            std::vector<Status>* out)
      : items_(items), checksum_(checksum_when_spilled), out_(out) {}
  ~SlotBatch() { Finish(); }

  // Ok once item i's copy is enqueued into `slot`; its answer comes with Finish.
  Status Add(size_t i, std::unique_ptr<PutSlot> slot) {
    const BufferDesc& s = items_[i].src;
    if (pending_ + s.size > kMaxPendingSlotBytes) Finish();
    EC_RETURN_IF_ERROR(cuda::EnqueueCopy(slot->bytes().data(), s.data, s.size,
                                         cuda::Direction::kDeviceToHost, s.device, s.stream));
    pending_ += s.size;
    idx_.push_back(i);
    slots_[i] = std::move(slot);
    return Status::Ok();
  }
  bool empty() const { return idx_.empty(); }

  void Finish() {
    std::vector<size_t> copied = idx_;
    WaitForStreams(items_, &copied, out_);  // a failed copy's block is dropped uncommitted
    for (size_t i : copied) (*out_)[i] = slots_[i]->Commit(checksum_);
    slots_.clear();
    idx_.clear();
    pending_ = 0;
  }

 private:
  const std::vector<BufferPut>& items_;
  const bool checksum_;
  std::vector<Status>* out_;
  std::vector<size_t> idx_;
  std::map<size_t, std::unique_ptr<PutSlot>> slots_;
  uint64_t pending_ = 0;
};

// Device->host copies straight into reserved blocks (not landing ones: an item that size
// stays for PutFromBuffer, as does one for which no block is to be had this way).
void IntoSlots(Reservations& r, std::string_view ns, const std::vector<BufferPut>& items,
               const BufferPutOptions& o, std::vector<size_t>* idx, std::vector<Status>* out,
               std::vector<PutRoute>* way) {
  std::vector<size_t> rest;
  SlotBatch batch(items, o.checksum_when_spilled, out);
  for (size_t i : *idx) {
    const BufferPut& it = items[i];
    if (o.landing && it.src.size >= kLandingMinBytes) {
      rest.push_back(i);
      continue;
    }
    auto slot = r.ReserveSlot(ns, it.key, it.meta, it.src.size, false);
    if (!slot.ok() && !batch.empty()) {  // perhaps no room while this batch holds blocks
      batch.Finish();
      slot = r.ReserveSlot(ns, it.key, it.meta, it.src.size, false);
    }
    if (!slot.ok()) {
      if (slot.status().IsInvalidArgument())
        rest.push_back(i);
      else
        (*out)[i] = slot.status();
      continue;
    }
    (*way)[i] = PutRoute::kSlot;
    Status st = batch.Add(i, std::move(slot).value());
    if (!st.ok()) (*out)[i] = st;
  }
  batch.Finish();
  *idx = std::move(rest);
}

}  // namespace

std::vector<Status> PutManyFromBuffers(Cache& cache, std::string_view ns,
                                       const std::vector<BufferPut>& items,
                                       const BufferPutOptions& o, std::vector<PutRoute>* routes) {
  std::vector<Status> out(items.size(), Status::Ok());
  std::vector<PutRoute> way(items.size(), PutRoute::kHost);
  std::vector<size_t> dev;  // device items not put yet
  for (size_t i = 0; i < items.size(); ++i) {
    const BufferDesc& s = items[i].src;
    if (!s.on_device() || s.size == 0)
      out[i] = cache.Put(ns, items[i].key, items[i].meta, s.span());
    else
      dev.push_back(i);
  }
  const CacheCapabilities caps = cache.capabilities();
  if (!dev.empty() && o.device_puts && caps.device_io && (caps.device_tier || caps.device_puts)) {
    WaitForStreams(items, &dev, &out);  // the store copies on a stream of its own
    std::vector<DeviceSource> srcs;
    for (size_t i : dev)
      srcs.push_back({items[i].key, items[i].meta, items[i].src.data, items[i].src.size});
    std::vector<Status> got = caps.device_io->PutManyFromDevice(ns, srcs, o.checksum_when_spilled);
    std::vector<size_t> refused;  // memory a daemon cannot open: on below
    for (size_t k = 0; k < dev.size(); ++k) {
      way[dev[k]] = PutRoute::kCacheCopy;
      if (got[k].ok() || caps.device_tier || !got[k].IsInvalidArgument())
        out[dev[k]] = std::move(got[k]);
      else
        refused.push_back(dev[k]);
    }
    dev = std::move(refused);
  }
  if (!dev.empty() && caps.reservations)
    IntoSlots(*caps.reservations, ns, items, o, &dev, &out, &way);
  BufferPutOptions rest = o;
  rest.device_puts = false;  // those left were refused that way, or never offered it
  for (size_t i : dev)
    out[i] = PutFromBuffer(cache, ns, items[i].key, items[i].meta, items[i].src, rest, &way[i]);
  if (routes) *routes = std::move(way);
  return out;
}

}  // namespace ecstore
