// Store::ReserveSlot: a PutReservation of the pool as the PutSlot that Cache callers fill.
#include <memory>
#include <utility>

#include "store/store.h"

namespace ecstore {
namespace {

class PoolSlot : public PutSlot {
 public:
  PoolSlot(Store* store, PutReservation r) : store_(store), r_(std::move(r)) {}
  std::span<uint8_t> bytes() const override { return r_.bytes(); }
  Status Commit(bool checksum_when_spilled) override {
    if (r_.bytes().data() == nullptr)
      return Status::InvalidArgument("this reservation was committed already");
    if (checksum_when_spilled) r_.ChecksumWhenSpilled();
    return store_->Commit(std::move(r_));
  }

 private:
  Store* const store_;
  PutReservation r_;  // moved into Commit; until then its block is held
};

}  // namespace

Result<std::unique_ptr<PutSlot>> Store::ReserveSlot(std::string_view ns, std::string_view key,
                                                    const TensorMeta& meta, uint64_t bytes, bool) {
  auto r = Reserve(ns, key, meta, bytes);
  if (!r.ok()) return r.status();
  return std::unique_ptr<PutSlot>(std::make_unique<PoolSlot>(this, std::move(r).value()));
}

}  // namespace ecstore
