// RemoteAdmin: the Admin facet of a net::Client -- a daemon's whole store verified or
// compacted there, over the client's connection (VERIFY, COMPACT).
//
//   if (Admin* a = client->capabilities().admin) auto rep = a->Verify(nullptr);
//
// Each request waits as long as the work takes (no reply timeout) and is not retried: a
// verify of a large disk tier runs for minutes, and a retry would run it again.
//
// Thread rules: as its Client's (one thread at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cache/cache.h"
#include "net/connection.h"
#include "net/protocol.h"

namespace ecstore::net {

class RemoteAdmin : public ecstore::Admin {
 public:
  explicit RemoteAdmin(Connection* link) : link_(link) {}
  // The server's Store::Verify; progress (optional) is told once, at the end.
  Result<VerifyReport> Verify(
      const std::function<void(uint64_t done, uint64_t total)>& progress) override;
  // The server compacts at threshold 1.0 (every sealed segment with dead bytes); another
  // threshold is InvalidArgument, asked of a daemon.
  Result<CompactReport> Compact(double live_ratio_threshold) override;

 private:
  Result<std::string> Ask(Op op, Op expect);  // the reply's JSON text
  Connection* const link_;
};

}  // namespace ecstore::net
