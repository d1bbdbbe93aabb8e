// The `remote` workload: gets of encoder-cache entries from a server in another process,
// over TCP loopback, against a plain socket stream between the same two processes and
// against Redis (Debian's redis-server, started here) on the same values; same-host gets
// through shared memory against memcpy of the same values into the same destination, and
// same-host puts over the unix socket and through a put arena against the same memcpy.
// Thread rules: RunRemote from one thread; it forks and stops its own server processes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ecstore::bench {

struct Sample {
  double gbps = 0, ops_per_s = 0, p50_us = 0, p99_us = 0;
};

struct RemoteResults {
  Sample ecstore_tcp;
  Sample ecstore_shm;    // same-host: copy out of the mapped pool under a lease
  Sample memcpy_values;  // its limit: the same values memcpy'd from pinned memory, same dst
  Sample socket_stream;  // the faster of the runs before and after the TCP gets
  std::pair<double, double> socket_stream_runs;  // their GB/s, before and after
  Sample ecstore_tcp_put;                        // Client::Put over TCP loopback, new keys
  Sample ecstore_tcp_reput;                      // the same, of the keys and bytes the server holds
  Sample ecstore_shm_put;     // same host, new keys: Client::Put (through the put arena)
  Sample ecstore_socket_put;  // ... with ClientOptions::put_arena off: over the unix socket
  Sample socket_upload;       // the same bytes sent the other way on the plain stream: the faster
  std::pair<double, double> socket_upload_runs;  // of the runs beside each (GB/s)
  Sample ecstore_shm_lookup;  // same host: Client::Lookup of a held key, one round trip
  Sample unix_ping_pong;      // its limit: frames of the same sizes over a unix socket pair
  std::optional<Sample> redis;
  std::string redis_note;  // why Redis did not run, when it did not
};

RemoteResults RunRemote(const std::vector<std::span<const uint8_t>>& values, int rounds,
                        const std::string& dir);

}  // namespace ecstore::bench
