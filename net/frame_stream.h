// FrameStream: a client's control connection as frames -- the socket, the request ids it
// numbers, and the reading of replies: a small reply's whole body, or a GET's info and then
// its bytes straight into the caller's buffer. An ERROR frame answers the server's Status; a
// closed, timed-out or malformed stream is Unavailable (the Client then reconnects).
//
//   FrameStream s;
//   s.Adopt(std::move(fd));
//   EC_RETURN_IF_ERROR(s.Send(Op::kStats, ""));
//   auto body = s.ReadReply(Op::kStatsOk);
//
// Thread rules: owned by its Client, used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "base/status.h"
#include "cache/cache.h"
#include "net/protocol.h"
#include "net/stream.h"

namespace ecstore::net {

class FrameStream {
 public:
  bool valid() const { return io_.valid(); }
  int fd() const { return io_.fd(); }
  void reset() { io_.reset(); }
  void Adopt(UniqueFd fd) {
    io_.Adopt(std::move(fd));
    sends_whole_ = true;
  }
  // After Adopt, where the connection is TLS: its bytes go through the session from now on.
  void SetTls(std::unique_ptr<TlsSession> session) { io_.SetTls(std::move(session)); }
  const TlsSession* tls() const { return io_.tls(); }
  // Whether a reply's bytes are already here (decrypted), which poll() would not show.
  bool Buffered() const { return io_.Buffered(); }
  UniqueFd Take() { return io_.Take(); }
  // Every request frame went out whole: the server reads the stream at a frame boundary,
  // so more frames may still follow on it (a timed-out reply leaves the reading side out of
  // step, never the sending side). False once a Send failed, maybe partway.
  bool sends_whole() const { return sends_whole_; }

  // One request frame: header, body, then an optional payload, in one gather write.
  Status Send(Op op, const std::string& body, std::span<const uint8_t> payload = {});
  // RELEASE of a server-side lease: no reply follows.
  Status SendRelease(void* lease_token);
  // The whole body of a small reply of opcode `expect`. With passed_fd, a descriptor sent
  // with the reply's first bytes (HELLO_OK over a unix socket) lands there, else -1.
  Result<std::string> ReadReply(Op expect, int* passed_fd = nullptr);
  // The same where a frame of opcode `note` may come first (GET_SHM_LANDED before its
  // GET_SHM_MANY_OK): *is_note says which came.
  Result<std::string> ReadReplyOrNote(Op expect, Op note, bool* is_note);
  // A GET reply's info, then its bytes into dst_for(info); a destination too small is
  // refused after the bytes are drained, so the stream stays in step.
  Status ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                      EntryInfo* info);

 private:
  Status ReadHeader(FrameHeader* h, int* passed_fd = nullptr);
  Result<std::string> ReadFrame(Op expect, Op note, bool* is_note, int* passed_fd);
  Stream io_;
  bool sends_whole_ = true;
  uint64_t next_id_ = 1;  // kept across reconnects
};

}  // namespace ecstore::net
