#include "net/shm_reads.h"

#include <cstring>
#include <thread>

#include "cache/told_copies.h"
#include "net/client.h"

namespace ecstore::net {

Result<EntryInfo> CopyOut(Result<ReadLease> lease, std::span<uint8_t> dst) {
  if (!lease.ok()) return lease.status();
  if (dst.size() < lease->size()) return BufferTooSmall(dst.size(), lease->info());
  std::memcpy(dst.data(), lease->data(), lease->size());
  return lease->info();
}

ShmReads::ShmReads(Client* client, Connection* link, bool* no_lease_batches)
    : client_(client), link_(link), no_lease_batches_(no_lease_batches) {}

ShmReads::~ShmReads() = default;

// Shared memory: the keys leased in batches (one GET_SHM_MANY each, the server reading the
// disk-only entries together), each entry copied out of the mapping and its lease released
// at once. A batch asks for at most a quarter of the pool in destination bytes, so that it
// stays within the server's leased-bytes share (half the pool by default) and does not
// evict the rest of the step to promote it; a key still refused for that share (Busy) is
// asked again alone once the batch's leases are released. A server that streams leases
// answers each batch in one GET_SHM_STREAM (StreamInto). From an older one, a batch holding
// both pool and disk-only entries goes as two requests in flight, the pool's first
// (SplitByTier): their copies run while the server reads the others from disk, as an
// embedded GetMany copies its pool hits while its reads are in flight.
std::vector<Result<EntryInfo>> ShmReads::CopyOutOfLeases(
    std::string_view ns, const std::vector<std::string>& keys,
    const std::vector<std::span<uint8_t>>& dsts) {
  const uint64_t budget = client_->shared_pool().size() / 4;
  std::vector<Result<EntryInfo>> out(keys.size(), Status::Unavailable("not read"));
  std::vector<size_t> refused;
  auto copy = [&](const std::vector<size_t>& which, std::vector<Result<ReadLease>> leases) {
    for (size_t j = 0; j < which.size(); ++j) {
      const size_t i = which[j];
      if (leases[j].status().IsBusy()) refused.push_back(i);
      out[i] = CopyOut(std::move(leases[j]), dsts[i]);  // released here
    }
  };
  for (size_t at = 0; at < keys.size();) {
    size_t end = at + 1;
    for (uint64_t bytes = dsts[at].size();
         end < keys.size() && end - at < kMaxLeaseBatch && bytes + dsts[end].size() <= budget;)
      bytes += dsts[end++].size();
    std::vector<std::vector<size_t>> groups;
    if (link_->transport()->caps().streamed_leases && !*no_lease_batches_) {
      StreamInto(ns, keys, dsts, at, end, &out, &refused);
    } else if ((groups = SplitByTier(ns, keys, at, end)).size() == 2) {
      LeaseInTwo(ns, keys, groups, copy);
    } else {
      std::vector<std::string> batch(keys.begin() + at, keys.begin() + end);
      copy(groups[0], client_->AcquireMany(ns, batch));
    }
    for (size_t i : refused) out[i] = CopyOut(client_->Acquire(ns, keys[i]), dsts[i]);
    refused.clear();
    at = end;
  }
  return out;
}

// keys[at, end) in one GET_SHM_STREAM (AcquireMany watched by ToldCopies): each pool hit and
// each disk read's pieces are copied out as the server tells of them (what was told together
// goes together, over the copy helpers), as in process. Leases so copied whole are released
// unread; the rest are copied out. A key refused for the leased-bytes share goes to *refused.
void ShmReads::StreamInto(std::string_view ns, const std::vector<std::string>& keys,
                          const std::vector<std::span<uint8_t>>& dsts, size_t at, size_t end,
                          std::vector<Result<EntryInfo>>* out, std::vector<size_t>* refused) {
  const std::vector<std::string> batch(keys.begin() + at, keys.begin() + end);
  const std::vector<std::span<uint8_t>> into(dsts.begin() + at, dsts.begin() + end);
  if (!copier_)
    copier_ =
        std::make_unique<CopyPool>(CopyPool::DefaultThreads(std::thread::hardware_concurrency()));
  std::vector<CopyPool::Item> copies;  // told, not yet copied
  ToldCopies told(
      into,
      [&](void* d, const uint8_t* p, uint64_t n) {
        copies.push_back({d, p, n});
        return true;
      },
      [&] {
        copier_->Copy(copies);
        copies.clear();
      });
  auto got = client_->AcquireMany(ns, batch, told.watch());
  for (size_t j = 0; j < batch.size(); ++j) {
    Result<ReadLease>& lease = got[j];
    if (lease.status().IsBusy()) refused->push_back(at + j);
    (*out)[at + j] = lease.ok() && told.Whole(j, *lease)
                         ? Result<EntryInfo>(lease->info())  // released on return
                         : CopyOut(std::move(lease), dsts[at + j]);
  }
}

// keys[at, end) as the pool's entries (and absent keys: answered at once) and the rest, where
// both are there and the server leases batches; else as one group.
std::vector<std::vector<size_t>> ShmReads::SplitByTier(std::string_view ns,
                                                       const std::vector<std::string>& keys,
                                                       size_t at, size_t end) {
  std::vector<std::vector<size_t>> groups(1);
  for (size_t i = at; i < end; ++i) groups[0].push_back(i);
  if (end - at < 2 || *no_lease_batches_) return groups;
  for (size_t i = at; i < end; ++i)
    if (!ValidateKey(keys[i]).ok()) return groups;  // AcquireMany answers it
  auto found =
      client_->LookupMany(ns, std::vector<std::string>(keys.begin() + at, keys.begin() + end));
  if (!found.ok()) return groups;
  std::vector<std::vector<size_t>> split(2);
  for (size_t i = at; i < end; ++i) {
    const auto& f = (*found)[i - at];
    split[!f || f->tier() == Tier::kPool ? 0 : 1].push_back(i);
  }
  return split[0].empty() || split[1].empty() ? groups : split;
}

// Both groups' requests sent, then each reply read and handed to `copy` in turn. A reply that
// cannot be read leaves the connection out of step: it is reset, and what is left goes
// through AcquireMany (which reconnects, retries, or goes key by key for an older server).
// Where the second send fails, the first request's reply is still read: an older server
// answers it "unknown opcode" and hangs up, maybe before the second is sent (seen in CI).
void ShmReads::LeaseInTwo(
    std::string_view ns, const std::vector<std::string>& keys,
    const std::vector<std::vector<size_t>>& groups,
    const std::function<void(const std::vector<size_t>&, std::vector<Result<ReadLease>>)>& copy) {
  std::vector<std::vector<std::string>> names(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i : groups[g]) names[g].push_back(keys[i]);
  Status sent;
  size_t in_flight = 0;
  for (; in_flight < groups.size(); ++in_flight)
    if (!(sent = link_->transport()->SendLeaseBatch(*link_, ns, names[in_flight])).ok()) break;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto got = g < in_flight && link_->valid()
                   ? link_->transport()->ReadLeaseBatch(*link_, ns, names[g])
                   : Result<std::vector<Result<ReadLease>>>(sent);
    if (!got.ok()) {
      if (AbandonIfUnknownOp(link_, got.status())) *no_lease_batches_ = true;
      link_->Abandon();  // out of step
      sent = got.status();
      copy(groups[g], client_->AcquireMany(ns, names[g]));
      continue;
    }
    copy(groups[g], std::move(got).value());
  }
}

}  // namespace ecstore::net
