#include "server/lease_batch.h"

namespace ecstore::net {

Result<Answer> AnswerLeaseBatch(Store* store, LeaseTable* leases, Op op, BodyReader* r,
                                const TellLanded& tell, LeaseBatchTally* tally) {
  auto req = ParseKeysBody(r);
  if (!req.ok()) return req.status();
  Cache::LandingWatch watch;
  Status told;
  const uint8_t* const pool = store->pool_region().base;
  if (op == Op::kGetShmStream)
    watch.landed = [&](size_t key, const uint8_t* at, uint64_t landed) {
      if (!told.ok()) return;
      BodyWriter f;
      f.U32(static_cast<uint32_t>(key));
      f.U64(static_cast<uint64_t>(at - pool));
      f.U64(landed);
      told = tell(f.data());
    };
  std::vector<Result<ReadLease>> got =
      store->AcquireMany(req->ns, req->keys, watch.landed ? &watch : nullptr);
  BodyWriter w;
  w.U32(static_cast<uint32_t>(got.size()));
  tally->keys = static_cast<uint32_t>(got.size());
  tally->ns = req->ns;
  if (!req->keys.empty()) tally->first_key = req->keys[0];
  for (size_t i = 0; i < got.size(); ++i) {
    Result<ReadLease>& g = got[i];
    Status st = g.status();
    if (g.ok()) {
      const EntryInfo e = g->info();  // a copy: the lease moves into the table below
      const uint64_t offset = static_cast<uint64_t>(g->data() - pool);
      tally->bytes_out += g->size();
      tally->served_from = g->served_from();
      auto id = leases->Add(std::move(g).value());  // Busy when the table is full
      if (id.ok()) {
        w.U8(i < watch.streamed.size() && watch.streamed[i] ? kLeaseStreamed : 1);
        w.U64(*id);
        w.U64(offset);
        WriteInfo(&w, e);
        continue;
      }
      st = id.status();
    }
    if (st.IsNotFound())
      ++tally->not_found;
    else
      tally->failed = true;
    w.U8(0);
    const std::string err = ErrorBody(st);
    w.Raw(err.data(), err.size());
  }
  return Answer{Status::Ok(), Op::kGetShmManyOk, w.data()};
}

}  // namespace ecstore::net
