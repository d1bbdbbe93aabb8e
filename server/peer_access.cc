#include "server/peer_access.h"

#include <arpa/inet.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/env.h"

namespace ecstore::net {
namespace {

struct Ends {
  sockaddr_storage local{}, peer{};
};

Result<Ends> EndsOf(int fd) {
  Ends e;
  socklen_t a = sizeof(e.local), b = sizeof(e.peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&e.local), &a) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&e.peer), &b) != 0)
    return Status::FromErrno(errno, "the connection's addresses");
  if (e.peer.ss_family != AF_INET && e.peer.ss_family != AF_INET6)
    return Status::InvalidArgument("not a TCP connection");
  return e;
}

uint16_t PortOf(const sockaddr_storage& s) {  // network order
  return s.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(s).sin_port
                                : reinterpret_cast<const sockaddr_in6&>(s).sin6_port;
}

void CopyAddr(const sockaddr_storage& s, __be32 out[4]) {
  if (s.ss_family == AF_INET)
    out[0] = reinterpret_cast<const sockaddr_in&>(s).sin_addr.s_addr;
  else
    std::memcpy(out, &reinterpret_cast<const sockaddr_in6&>(s).sin6_addr, 16);
}

// The peer's own socket looked up by its exact 4-tuple (no dump): one reply, its owner.
Status NoDescriptor(const char* what) {
  return errno == EMFILE || errno == ENFILE
             ? Status::Busy("server is out of file descriptors; try again later")
             : Status::FromErrno(errno, what);
}

Result<uid_t> UidBySockDiag(const Ends& e) {
  UniqueFd nl(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!nl.valid()) return NoDescriptor("sock_diag");
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof(msg);
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = e.peer.ss_family;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  msg.req.id.idiag_sport = PortOf(e.peer);  // the peer's socket: from it, to us
  msg.req.id.idiag_dport = PortOf(e.local);
  CopyAddr(e.peer, msg.req.id.idiag_src);
  CopyAddr(e.local, msg.req.id.idiag_dst);
  msg.req.id.idiag_cookie[0] = msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(nl.get(), &msg, sizeof(msg), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) <
      0)
    return Status::FromErrno(errno, "sock_diag request");
  alignas(nlmsghdr) char buf[8192];
  ssize_t n = recv(nl.get(), buf, sizeof(buf), 0);
  if (n < 0) return Status::FromErrno(errno, "sock_diag reply");
  auto* h = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<uint32_t>(n)) || h->nlmsg_type == NLMSG_ERROR ||
      h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg)))
    return Status::NotFound("sock_diag has no such socket");
  return static_cast<uid_t>(static_cast<inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid);
}

// "0100007F:1F90" (/proc/net/tcp's form: the raw address words in hex, the port's value).
std::string ProcAddr(const sockaddr_storage& s) {
  __be32 w[4] = {};
  CopyAddr(s, w);
  char out[48];
  int at = 0;
  for (int i = 0; i < (s.ss_family == AF_INET ? 1 : 4); ++i)
    at += std::snprintf(out + at, sizeof(out) - at, "%08X", w[i]);
  std::snprintf(out + at, sizeof(out) - at, ":%04X", ntohs(PortOf(s)));
  return out;
}

// Where the socket table cannot be asked: the peer's line of /proc/net/tcp(6).
Result<uid_t> UidByProc(const Ends& e) {
  const char* table = e.peer.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6";
  std::ifstream in(table);
  if (!in) return NoDescriptor(table);
  const std::string from = ProcAddr(e.peer), to = ProcAddr(e.local);
  std::string line, sl, local, remote, st, queues, timer, retr;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    uid_t uid;
    if ((f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid) && local == from &&
        remote == to)
      return uid;
  }
  return Status::NotFound("no socket " + from + " -> " + to + " in /proc/net");
}

bool InGroup(uid_t uid, gid_t gid) {
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) return false;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) return false;
  }
  for (int i = 0; i < n; ++i)
    if (groups[i] == gid) return true;
  return false;
}

}  // namespace

Result<uid_t> LoopbackPeerUid(int fd) {
  auto e = EndsOf(fd);
  if (!e.ok()) return e.status();
  auto uid = UidBySockDiag(*e);
  return uid.ok() || uid.status().IsBusy() ? uid : UidByProc(*e);
}

Result<uid_t> LoopbackPeerUidFromProc(int fd) {
  auto e = EndsOf(fd);
  if (!e.ok()) return e.status();
  return UidByProc(*e);
}

Result<uid_t> UnixPeerUid(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return Status::FromErrno(errno, "SO_PEERCRED");
  return cred.uid;
}

Status LocalPeerMayConnect(int fd, bool unix_socket, const PeerRule& rule) {
  Result<uid_t> uid = unix_socket ? UnixPeerUid(fd) : LoopbackPeerUid(fd);
  const std::string remedy =
      "; a server without a token serves only its own user on this host (and its group with "
      "--group-access): give it --token-file FILE (or EC_STORE_TOKEN) and its clients the "
      "same secret";
  if (uid.status().IsBusy()) return uid.status();
  if (!uid.ok())
    return Status::InvalidArgument("cannot tell which local user connected (" +
                                   uid.status().message() + ")" + remedy);
  if (*uid == geteuid() || *uid == 0 || (rule.group_access && InGroup(*uid, getegid())))
    return Status::Ok();
  return Status::InvalidArgument("user " + std::to_string(*uid) + " may not use this server" +
                                 remedy);
}

}  // namespace ecstore::net
