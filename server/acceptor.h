// Acceptor: the thread that takes new clients off a Server's listeners (its TCP port, and
// the unix socket where shared memory is offered) and hands each to `adopt`, which keeps it
// or says why not; a client refused is told why before it is hung up on. At the open-files
// limit, one descriptor held in reserve is given up to accept a client and refuse it
// clearly, instead of leaving it in the backlog. Between accepts, and at least every 100 ms,
// it calls `tick` (the connections' timers).
//
//   Acceptor a;
//   a.Start(tcp_fd, unix_fd_or_minus_1,
//           [&](UniqueFd* fd, std::string peer, bool unix_socket) { return table.Adopt(...); },
//           [&] { table.Tick(Clock::now()); });
//   a.Stop();  // after the listeners are shut down
//
// Thread rules: Start/Stop from the owner; adopt and tick run on the acceptor's thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "base/status.h"
#include "net/socket.h"

namespace ecstore::net {

class Acceptor {
 public:
  // "" when the socket was taken (*fd moved from), else why the client is refused.
  using Adopt = std::function<std::string(UniqueFd* fd, std::string peer, bool unix_socket)>;
  ~Acceptor() { Stop(); }
  Status Start(int tcp_fd, int unix_fd, Adopt adopt, std::function<void()> tick);
  void Stop();

  // Tells a client it cannot be served now, then hangs up (the caller closes fd). In the
  // clear: a TLS client sees a failed handshake.
  static void Refuse(int fd, const std::string& why);

 private:
  void Run();
  void AcceptOne(int listener, bool unix_socket);
  void Warn(const std::string& what);  // at most every 10 s
  int tcp_ = -1, unix_ = -1;
  Adopt adopt_;
  std::function<void()> tick_;
  UniqueFd reserve_;
  std::chrono::steady_clock::time_point last_warning_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace ecstore::net
