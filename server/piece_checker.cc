#include "server/piece_checker.h"

#include <algorithm>
#include <system_error>

namespace ecstore::net {

PieceChecker::PieceChecker() : thread_([this] { Loop(); }) {}

PieceChecker::~PieceChecker() {
  {
    MutexLock l(&mu_);
    stop_ = true;
  }
  work_.NotifyOne();
  thread_.join();
}

void PieceChecker::Begin(PutReservation* r) {
  MutexLock l(&mu_);
  r_ = r;
  landed_ = checked_to_ = 0;
}

void PieceChecker::Landed(uint64_t n) {
  {
    MutexLock l(&mu_);
    landed_ = n;
  }
  work_.NotifyOne();
}

void PieceChecker::Finish() {
  UniqueLock l(&mu_);
  while (r_ && checked_to_ < landed_) checked_.Wait(l);
  r_ = nullptr;
}

void PieceChecker::Loop() {
  UniqueLock l(&mu_);
  for (;;) {
    while (!stop_ && !(r_ && checked_to_ < landed_)) work_.Wait(l);
    if (stop_) return;
    PutReservation* r = r_;
    const uint64_t to = landed_;
    l.unlock();
    r->Filled(to);  // outside the lock: the owner goes on receiving meanwhile
    l.lock();
    checked_to_ = to;
    checked_.NotifyOne();
  }
}

bool CheckPiecesBehind(int setting, unsigned cores) {
  return setting < 0 ? cores >= 4 : setting > 0;
}

PieceChecker* CheckerFor(std::unique_ptr<PieceChecker>& slot, bool enabled, uint64_t size,
                         uint64_t piece) {
  if (!enabled || size < 2 * piece) return nullptr;
  if (!slot) try {
      slot = std::make_unique<PieceChecker>();
    } catch (const std::system_error&) {  // out of threads: checked on the receiving one
      return nullptr;
    }
  return slot.get();
}

Status ReceivePieces(PutReservation& r, uint64_t from, uint64_t piece, PieceChecker* checker,
                     const std::function<Status(uint8_t* dst, uint64_t n)>& recv) {
  const uint64_t size = r.bytes().size();
  uint8_t* const base = r.bytes().data();
  if (checker) checker->Begin(&r);
  Status received;
  for (uint64_t got = from; got < size;) {
    const uint64_t n = std::min(std::max<uint64_t>(piece, 1), size - got);
    received = recv(base + got, n);
    if (!received.ok()) break;
    got += n;
    checker ? checker->Landed(got) : r.Filled(got);
  }
  if (checker) checker->Finish();  // before the caller commits or drops the reservation
  return received;
}

}  // namespace ecstore::net
