// Loopback ports, and etcd members the cluster benches start on loopback, in child processes, and
// stop.
//
//   EtcdProcs etcd = StartEtcdCluster(dir, 3);   // three members, one cluster
//   auto uri = etcd.uri("bench");                // etcd://127.0.0.1:P1,.../bench
//
// Thread rules: from one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ecstore::bench {

// A loopback port free now (closed on return: the child that binds it comes next).
uint16_t FreePort();

struct EtcdProcs {
  std::vector<pid_t> pids;
  std::vector<uint16_t> client_ports;
  std::string uri(const std::string& cluster) const;  // every member's client address
};

// `members` etcd processes forming one cluster, data under dir/NAME; waits until a range
// read answers (20 s), else stops them and returns none.
EtcdProcs StartEtcdCluster(const std::string& dir, int members);
void StopProcess(pid_t pid);  // SIGKILL and reap
// The CPU seconds (user + system) a process has used, from /proc; -1 where unknown.
double CpuSeconds(pid_t pid);

}  // namespace ecstore::bench
