#include "store/batch_reads.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace ecstore {
namespace {

// The leases taken after a batch's promotions, moved into the places they fill.
void Adopt(std::vector<std::optional<ReadLease>>&& fresh,
           std::vector<std::optional<ReadLease>>& into) {
  for (size_t i = 0; i < fresh.size(); ++i)
    if (fresh[i]) into[i] = std::move(fresh[i]);
}

}  // namespace

std::vector<Result<EntryInfo>> BatchReads::GetMany(std::string_view ns,
                                                   const std::vector<std::string>& keys,
                                                   const std::vector<std::span<uint8_t>>& dsts) {
  // The keys in the pool are leased first; the disk entries' reads then go out in one batch,
  // and the leased entries are copied out while those reads are in flight (the copy and the
  // disk overlap instead of taking turns). Each disk entry's pieces are copied to its
  // destination as they land, too, so only the last piece's copy follows the batch. A key
  // whose read failed (corrupt, a failing device) answers that failure; the rest go through
  // Get. Copies that follow the batch instead of its pieces cost a fifth or more of the raw
  // read's speed (bench get_disk, GetMany of 8 disk entries).
  std::vector<std::optional<ReadLease>> hot = kd_->LeasePoolCopies(ns, keys, &dsts, nullptr);
  bool copied = false;
  auto copy_out = [&](const std::vector<std::optional<ReadLease>>& leases) {
    std::vector<CopyPool::Item> items;
    for (size_t i = 0; i < leases.size(); ++i)
      if (leases[i]) items.push_back({dsts[i].data(), leases[i]->data(), leases[i]->size()});
    copy_pool_.Copy(items);
  };
  auto copy_hot = [&] {
    if (!std::exchange(copied, true)) copy_out(hot);
  };
  std::vector<Status> pre(keys.size());
  HostEvictor::KeyDelivery got(dsts);
  if (keys.size() > 1 && promote_) pre = ev_->PromoteKeys(ns, keys, copy_hot, &got);
  copy_hot();                                    // no disk read went out
  std::vector<bool> again(got.promoted.size());  // promoted, but their bytes are not in dsts
  for (size_t i = 0; i < again.size(); ++i) again[i] = got.promoted[i] && !got.delivered[i];
  if (std::find(again.begin(), again.end(), true) != again.end()) {
    std::vector<std::optional<ReadLease>> fresh = kd_->LeasePoolCopies(ns, keys, &dsts, &again);
    copy_out(fresh);
    Adopt(std::move(fresh), hot);
  }
  std::vector<Result<EntryInfo>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (hot[i])
      out.push_back(hot[i]->info());
    else if (i < got.delivered.size() && got.delivered[i])
      out.push_back(*got.delivered[i]);
    else if (!pre[i].ok() && !pre[i].IsBusy())
      out.push_back(pre[i]);
    else if (i < dsts.size())
      out.push_back(single_->Get(ns, keys[i], dsts[i]));
    else
      out.push_back(Status::InvalidArgument("GetMany needs one buffer per key"));
  }
  return out;
}

std::vector<Result<ReadLease>> BatchReads::AcquireMany(std::string_view ns,
                                                       const std::vector<std::string>& keys,
                                                       Cache::LandingWatch* watch) {
  // As GetMany without the copies: an engine that reads in place (a host -> device copy
  // straight from the pool) takes a step's entries together, its disk reads in one batch.
  // A lease needs the bytes in the pool, so this promotes whatever promote_on_get says, as
  // Acquire does; each promoted entry is leased as it is installed. A watch is told of the
  // pool hits at once (before the disk reads go out), and of each disk read's pieces as they
  // land; a watched batch goes this way for a single disk entry too.
  std::vector<std::optional<ReadLease>> got = kd_->LeasePoolCopies(ns, keys, nullptr, nullptr);
  std::vector<Status> pre(keys.size());
  if (watch) watch->streamed.assign(keys.size(), false);
  for (size_t i = 0; watch && watch->landed && i < keys.size(); ++i)
    if (got[i]) {  // a pool hit: all there, and leased
      watch->landed(i, got[i]->data(), got[i]->size());
      watch->streamed[i] = true;
    }
  const auto missing = std::count_if(got.begin(), got.end(), [](auto& l) { return !l; });
  std::vector<bool> over(keys.size());
  if (missing > 1 || (watch && missing == 1)) {
    // Only what fits the lease budget is promoted: the batch holds every lease it takes, so
    // one larger than the pool could free filled it with its own pins and kept every other
    // put and get Busy until it gave up (two minutes for 40 MiB of keys over a 16 MiB pool).
    std::vector<size_t> index;
    std::vector<std::string> sub = WithinLeaseBudget(ns, keys, got, &over, &index);
    static const std::vector<std::span<uint8_t>> kNoCopies;  // promoted into the pool only
    HostEvictor::KeyDelivery promoted(kNoCopies);
    promoted.lease = true;
    std::function<void(size_t, const uint8_t*, uint64_t)> landed;
    if (watch && watch->landed) {
      landed = [&](size_t k, const uint8_t* at, uint64_t n) { watch->landed(index[k], at, n); };
      promoted.watch = &landed;
    }
    std::vector<Status> sub_pre = ev_->PromoteKeys(ns, sub, nullptr, &promoted);
    for (size_t k = 0; k < sub.size(); ++k) {
      const size_t i = index[k];
      pre[i] = sub_pre[k];
      if (got[i] || !promoted.leased[k]) continue;
      got[i] = std::move(promoted.leased[k]);
      if (watch) watch->streamed[i] = promoted.streamed[k];
    }
  }
  std::vector<Result<ReadLease>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i])
      out.push_back(std::move(*got[i]));
    else if (over[i])
      out.push_back(Status::Busy(
          "this batch would hold more than half the pool under lease at once; acquire the "
          "rest once these leases are released (or raise the pool size)"));
    else if (!pre[i].ok() && !pre[i].IsBusy())
      out.push_back(pre[i]);
    else  // absent, bad input, on the device only, or not promoted here
      out.push_back(single_->Acquire(ns, keys[i]));
  }
  return out;
}

// The keys not leased yet whose entries the batch may read into the pool: in order, while
// the batch's leased bytes stay within half the pool (what one reader may hold under lease;
// the first key always goes). *over marks the others; (*index)[k] is the place of result k.
std::vector<std::string> BatchReads::WithinLeaseBudget(
    std::string_view ns, const std::vector<std::string>& keys,
    const std::vector<std::optional<ReadLease>>& got, std::vector<bool>* over,
    std::vector<size_t>* index) {
  std::vector<std::string> sub;
  const uint64_t budget = kd_->host_tier()->capacity() / 2;
  uint64_t leased = 0;
  std::vector<bool> skip(keys.size());
  for (size_t i = 0; i < got.size(); ++i) {
    skip[i] = got[i].has_value();
    if (got[i]) leased += got[i]->size();
  }
  const std::vector<uint64_t> to_read = kd_->UnpooledBytes(ns, keys, skip);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i]) continue;
    const uint64_t bytes = to_read[i];
    if (bytes > 0 && leased > 0 && leased + bytes > budget) {
      (*over)[i] = true;
      continue;
    }
    leased += bytes;
    sub.push_back(keys[i]);
    index->push_back(i);
  }
  return sub;
}

}  // namespace ecstore
