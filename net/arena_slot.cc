// Client::ReserveSlot: a block of this connection's put arena (ReservePut) as the PutSlot
// that Cache callers fill, committed with CommitPut.
#include <memory>
#include <utility>

#include "net/client.h"

namespace ecstore::net {
namespace {

class ArenaSlot : public PutSlot {
 public:
  ArenaSlot(Client* client, ArenaReservation a)
      : client_(client), a_(std::move(a)), counter_(a_.Landing()) {}
  std::span<uint8_t> bytes() const override { return a_.bytes(); }
  std::span<const uint8_t> region() const override {
    return a_.arena() ? std::span<const uint8_t>(a_.arena()->bytes()) : std::span<const uint8_t>();
  }
  bool landing() const override { return static_cast<bool>(counter_); }
  void Landed(uint64_t n) const override {
    if (counter_) counter_.Landed(n);
  }
  void FailLanding() const override {
    if (counter_) counter_.Fail();
  }
  uint64_t landed() const override { return counter_ ? counter_.Load() : 0; }
  Status AwaitLanded(std::chrono::milliseconds timeout, uint64_t at_least) const override {
    return a_.AwaitLanded(timeout, at_least);
  }
  Status Commit(bool checksum_when_spilled) override {
    return client_->CommitPut(std::move(a_), checksum_when_spilled);
  }

 private:
  Client* const client_;
  ArenaReservation a_;      // moved into CommitPut
  LandingCounter counter_;  // a landing block's (keeps its arena mapped)
};

}  // namespace

Result<std::unique_ptr<PutSlot>> Client::ReserveSlot(std::string_view ns, std::string_view key,
                                                     const TensorMeta& meta, uint64_t bytes,
                                                     bool landing) {
  auto a = ReservePut(ns, key, meta, bytes, landing);
  if (!a.ok()) return a.status();
  return std::unique_ptr<PutSlot>(std::make_unique<ArenaSlot>(this, std::move(a).value()));
}

}  // namespace ecstore::net
