#include "bench/etcd_proc.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster/etcd.h"
#include "net/socket.h"

namespace ecstore::bench {

uint16_t FreePort() {
  uint16_t port = 0;
  auto fd = net::Listen({"127.0.0.1", 0}, &port);
  return fd.ok() ? port : 0;
}

std::string EtcdProcs::uri(const std::string& cluster) const {
  std::string u = "etcd://";
  for (size_t i = 0; i < client_ports.size(); ++i)
    u += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(client_ports[i]);
  return u + "/" + cluster;
}

EtcdProcs StartEtcdCluster(const std::string& dir, int members) {
  EtcdProcs e;
  std::vector<uint16_t> peers;
  std::string initial;
  for (int i = 0; i < members; ++i) {
    e.client_ports.push_back(FreePort());
    peers.push_back(FreePort());
    initial +=
        (i ? ",m" : "m") + std::to_string(i) + "=http://127.0.0.1:" + std::to_string(peers.back());
  }
  for (int i = 0; i < members; ++i) {
    const std::string c = "http://127.0.0.1:" + std::to_string(e.client_ports[i]);
    const std::string p = "http://127.0.0.1:" + std::to_string(peers[i]);
    const std::string name = "m" + std::to_string(i), data = dir + "/" + name;
    pid_t pid = fork();
    if (pid == 0) {
      std::freopen("/dev/null", "w", stdout);
      std::freopen("/dev/null", "w", stderr);
      execlp("etcd", "etcd", "--name", name.c_str(), "--data-dir", data.c_str(),
             "--listen-client-urls", c.c_str(), "--advertise-client-urls", c.c_str(),
             "--listen-peer-urls", p.c_str(), "--initial-advertise-peer-urls", p.c_str(),
             "--initial-cluster", initial.c_str(), "--initial-cluster-state", "new",
             static_cast<char*>(nullptr));
      _exit(127);
    }
    e.pids.push_back(pid);
  }
  std::string cluster;
  auto probe = cluster::EtcdClient::Parse(e.uri("probe"), &cluster);
  for (int i = 0; i < 1000 && probe.ok(); ++i) {
    if (probe->PrefixAt("/").ok()) return e;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t pid : e.pids) StopProcess(pid);
  return {};
}

void StopProcess(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGCONT);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

double CpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return -1;
  // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace ecstore::bench
