#include "net/lease_generation.h"

#include <utility>

namespace ecstore::net {

void LeaseGeneration::Release(void* token) {
  --outstanding_;
  if (!retired_) {
    live_->Release(token);
    return;
  }
  (void)control_.SendRelease(token);  // no reply; a dead server's socket just fails
  if (outstanding_ == 0) {
    auto dropped = dropped_;  // outlives *this, which it destroys: nothing may follow
    dropped(this);
  }
}

void LeaseGeneration::Retire(std::unique_ptr<Transport> transport, UniqueFd control) {
  retired_ = true;
  transport_ = std::move(transport);
  control_.Adopt(std::move(control));
}

}  // namespace ecstore::net
