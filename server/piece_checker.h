// PieceChecker: a connection's helper thread that checks a TCP put's pieces -- runs its
// reservation's Filled (each piece's checksum, and its comparison with the entry the key
// holds) -- while the connection's thread receives the next piece. On one thread the two take
// turns, and a put over TCP runs about a tenth below the upload stream; with the checker it
// runs at the stream's speed where the machine has a core to spare (bench `remote`).
//
//   PieceChecker checker;                 // one per connection, its thread started here
//   checker.Begin(&reservation);
//   for (...) { RecvAll(fd, dst + got, n); checker.Landed(got += n); }
//   checker.Finish();                     // every piece checked; the reservation is ours again
//
// Pieces are checked in order, each once, as Filled would be on the receiving thread; what
// has landed but not been checked is left to Commit (Filled's contract).
// Thread rules: Begin, Landed and Finish from the owning connection's thread only; between
// Begin and Finish the helper calls the reservation's Filled and nothing else of it, so the
// owner must not touch the reservation (beyond writing past what it has told Landed) until
// Finish returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "base/mutex.h"
#include "store/store.h"

namespace ecstore::net {

class PieceChecker {
 public:
  PieceChecker();
  ~PieceChecker();  // joins the helper (call Finish first where a put is in progress)
  PieceChecker(const PieceChecker&) = delete;
  PieceChecker& operator=(const PieceChecker&) = delete;

  void Begin(PutReservation* r) EXCLUDES(mu_);
  // Bytes [0, n) of the reservation are in place: checked by the helper from here on.
  void Landed(uint64_t n) EXCLUDES(mu_);
  // Returns once everything told by Landed is checked, and releases the reservation.
  void Finish() EXCLUDES(mu_);

 private:
  void Loop() EXCLUDES(mu_);

  Mutex mu_;
  CondVar work_, checked_;
  PutReservation* r_ GUARDED_BY(mu_) = nullptr;
  uint64_t landed_ GUARDED_BY(mu_) = 0;
  uint64_t checked_to_ GUARDED_BY(mu_) = 0;  // below landed_: the helper is at work
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it reads the members above
};

// Whether a server's connections check TCP puts' pieces on a helper: `setting` 1 yes, 0 no,
// -1 (the default) where the machine has 4 or more cores, as CopyPool's helpers: a helper
// per connection is a core per putting client, which a small machine does not have to spare
// (there, forced on, it slows new keys' puts and speeds re-puts of held bytes).
bool CheckPiecesBehind(int setting, unsigned cores);

// A connection's checker for a put of `size` bytes in pieces of `piece`: `slot`'s, started at
// the connection's first put of two or more pieces where `enabled`. nullptr where the pieces
// are checked on the receiving thread: not enabled, a put of one piece (nothing to overlap),
// or no thread to be had.
PieceChecker* CheckerFor(std::unique_ptr<PieceChecker>& slot, bool enabled, uint64_t size,
                         uint64_t piece);

// Receives the reservation's bytes [from, size) in pieces of `piece` bytes, recv(dst, n)
// filling each, and checks each as it lands: on `checker` where given, else on this thread.
// Returns recv's first failure; everything received before it has been checked, and the
// checker has let go of the reservation, either way.
Status ReceivePieces(PutReservation& r, uint64_t from, uint64_t piece, PieceChecker* checker,
                     const std::function<Status(uint8_t* dst, uint64_t n)>& recv);

}  // namespace ecstore::net
