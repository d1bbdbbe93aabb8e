// ShmReads: a same-host client's GetMany -- its keys leased in the server's pool in batches
// and each entry copied out of the mapping, with the copy helpers that run those copies.
//
//   ShmReads reads(client, &link, &no_lease_batches);
//   auto got = reads.CopyOutOfLeases("qwen", keys, dsts);  // result i for keys[i]
//
// Thread rules: belongs to its Client (one thread at a time); the copy helpers are its own.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/copy_pool.h"
#include "cache/cache.h"
#include "net/connection.h"

namespace ecstore::net {

class Client;

// A get over shared memory: the leased entry copied out of the mapping into dst, the lease
// released on return.
Result<EntryInfo> CopyOut(Result<ReadLease> lease, std::span<uint8_t> dst);

class ShmReads {
 public:
  // `client` leases (AcquireMany, Acquire, LookupMany) over `link`; *no_lease_batches is set
  // where the server turns batches down as unknown (an older server).
  ShmReads(Client* client, Connection* link, bool* no_lease_batches);
  ~ShmReads();
  ShmReads(const ShmReads&) = delete;
  ShmReads& operator=(const ShmReads&) = delete;
  std::vector<Result<EntryInfo>> CopyOutOfLeases(std::string_view ns,
                                                 const std::vector<std::string>& keys,
                                                 const std::vector<std::span<uint8_t>>& dsts);

 private:
  void StreamInto(std::string_view ns, const std::vector<std::string>& keys,
                  const std::vector<std::span<uint8_t>>& dsts, size_t at, size_t end,
                  std::vector<Result<EntryInfo>>* out, std::vector<size_t>* refused);
  std::vector<std::vector<size_t>> SplitByTier(std::string_view ns,
                                               const std::vector<std::string>& keys, size_t at,
                                               size_t end);
  void LeaseInTwo(
      std::string_view ns, const std::vector<std::string>& keys,
      const std::vector<std::vector<size_t>>& groups,
      const std::function<void(const std::vector<size_t>&, std::vector<Result<ReadLease>>)>& copy);

  Client* const client_;
  Connection* const link_;
  bool* const no_lease_batches_;
  std::unique_ptr<CopyPool> copier_;  // StreamInto's copies (made at its first use)
};

}  // namespace ecstore::net
