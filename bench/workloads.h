// ec-store-bench's workloads, each adding its rows (bench/results.h) against limits measured
// in the same run. bench_main.cc runs those the command line names.
// Thread rules: call from the bench's main thread, one workload at a time; a workload starts
// and joins its own threads.
#pragma once

#include "bench/common.h"

namespace ecstore::bench {

// limits.cc: single-thread memcpy; raw O_DIRECT disk write and read, and fio's.
void MeasureMemcpy(const Config& cfg);
void MeasureDisk(const Config& cfg);

// hot_disk.cc: put, get_hot and get_disk over one data set, hot in a pool that holds it, then
// on disk.
void HotAndDiskWorkloads(const Config& cfg, Payloads& pl);

// mixed.cc: spill (sustained puts through a small pool) and mixed (an engine's steps).
void SpillWorkload(const Config& cfg, Payloads& pl);
void MixedWorkload(const Config& cfg, Payloads& pl);
// mixed_gpu.cc: mixed's plan as a GPU engine runs it (hits land in device memory).
void MixedGpuWorkload(const Config& cfg, Payloads& pl);

// bookkeeping.cc: the structures beside the payloads -- index (open and lookups at scale),
// alloc (the pool allocator's fragmentation), policy (eviction over synthetic traces).
void IndexWorkload(const Config& cfg);
void AllocWorkload(const Config& cfg);
void PolicyWorkload(const Config& cfg);
// Placement over 3, 100 and 1000 nodes: balance, keys moved by a join, owners per second.
void ClusterWorkload(const Config& cfg);
// The same on a live cluster: routed gets and failover (bench/cluster_live.cc).
void ClusterLiveWorkload(const Config& cfg);
// A fleet of 1,000 simulated nodes under churn, through the real routing (bench/fleet.cc).
void FleetWorkload(const Config& cfg);
// A fleet's membership traffic on a real 3-member etcd: its CPU, and the staleness clients
// see (bench/etcd_fleet.cc).
void EtcdFleetWorkload(const Config& cfg);

// transports.cc: remote (TCP and shared memory, against a socket stream and Redis), rdma
// (verbs against TCP), device (the GPU tier against cudaMemcpy).
void RemoteWorkload(const Config& cfg, Payloads& pl);
void RdmaWorkload(const Config& cfg, Payloads& pl);
void DeviceWorkload(const Config& cfg, Payloads& pl);
// device_peer.cc: GPU 0's device tier read into GPU 1 (a peer copy) against
// cudaMemcpyPeerAsync, peer copies off, and host staging (two GPUs; a row says why not).
void DevicePeerWorkload(const Config& cfg);
// device_step.cc: a step of 32 x 2.87 MB from the host pool to the GPU in one call, against
// one copy, 32 copies and one batched copy of the same bytes.
void DeviceStepWorkload(const Config& cfg);

// tls.cc: gets and puts over TLS against plain TCP, handshakes, the ACL check.
void TlsWorkload(const Config& cfg, Payloads& pl);

// conns.cc: gets from a daemon holding 10, 1,000 and 10,000 idle connections; its memory.
void ConnsWorkload(const Config& cfg, Payloads& pl);

// erase.cc: entries with disk copies removed through a same-host daemon, batched (ERASE_MANY)
// and key by key, against EraseMany in this process.
void EraseWorkload(const Config& cfg);

// events.cc: the entry event stream -- puts with it against without, a subscriber's lag and
// the publisher's CPU, and holder precision routing by its index against an LRU guess.
void EventsWorkload(const Config& cfg, Payloads& pl);

}  // namespace ecstore::bench
